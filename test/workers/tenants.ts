import { env } from "cloudflare:workers";
import type { UsageRow } from "../../src/tenants/protocol.ts";
import { TENANTS_NAME } from "../../src/tenants/tenants-name.ts";

/** The gateway's one tenants object, as the Worker and the routing objects reach it. */
export const tenants = () => env.TENANTS.getByName(TENANTS_NAME);

export const DAY_MS = 86_400_000;

/** A row of usage as a routing object sends it: one request, half the prompt cached, a made-up cost, unless `extra` says. */
export function usageRow(key: string, day: string, model: string, backend: string, prompt: number, completion: number, extra: Partial<UsageRow> = {}): UsageRow {
  return { key, day, model, backend, promptTokens: prompt, completionTokens: completion, cachedTokens: Math.floor(prompt / 2), requests: 1, costMicros: prompt + 2 * completion, ...extra };
}
