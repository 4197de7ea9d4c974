import type { HookName } from "../config/schema.ts";
import { restampHook } from "./restamp.ts";
import type { Hook, HookPipeline } from "./types.ts";

const BUILT_IN: Record<HookName, Hook> = { restamp: restampHook };

export function buildPipeline(names: readonly HookName[]): HookPipeline {
  const hooks = names.map((n) => BUILT_IN[n]);
  return {
    request: hooks.filter((h) => h.onRequest),
    headers: hooks.filter((h) => h.onHeaders),
    chunk: hooks.filter((h) => h.onChunk),
    complete: hooks.filter((h) => h.onComplete),
  };
}
