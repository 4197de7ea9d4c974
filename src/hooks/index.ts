import type { HookName } from "../config/schema.ts";
import { restampHook } from "./restamp.ts";
import type { Hook, HookPipeline } from "./types.ts";
import { usageHook } from "./usage.ts";

const BUILT_IN: Record<HookName, Hook> = { restamp: restampHook };

function pipelineOf(hooks: readonly Hook[]): HookPipeline {
  return {
    request: hooks.filter((h) => h.onRequest),
    headers: hooks.filter((h) => h.onHeaders),
    chunk: hooks.filter((h) => h.onChunk),
    complete: hooks.filter((h) => h.onComplete),
    readsUsage: hooks.some((h) => h.readsUsage === true),
  };
}

export function buildPipeline(names: readonly HookName[]): HookPipeline {
  return pipelineOf(names.map((n) => BUILT_IN[n]));
}

/** A group's hooks with usage accounting first: what a virtual key that counts tokens runs. */
export function buildUsagePipeline(names: readonly HookName[]): HookPipeline {
  return pipelineOf([usageHook, ...names.map((n) => BUILT_IN[n])]);
}
