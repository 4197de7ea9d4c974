/**
 * The same warm-up before every run, whatever the router: the first requests of a fresh Miniflare
 * (its isolate, the group's Durable Object) or of a fresh peer process pay its start-up, and a
 * run's opening burst would otherwise measure that instead of the routing.
 */
import { replay, type ReplayOptions } from "../replay/index.ts";
import type { Trace } from "../traces/index.ts";

export const WARM_UP_REQUESTS = 8;

/**
 * Tiny prompts, unrelated to each other and to every trace, sent all at once, one output token
 * each. Rendered with the answer they stay shorter than one 16-token KV block, so no worker caches
 * any of them: the run still starts on empty caches.
 */
export function warmUpTrace(): Trace {
  return {
    kind: "single-turn",
    seed: 0,
    params: { requests: WARM_UP_REQUESTS },
    sessions: Array.from({ length: WARM_UP_REQUESTS }, (_, i) => ({
      id: `warm-up-${i}`,
      turns: [{ add: [{ role: "user", content: `warm ${i}` }], withHistory: false, appendReply: false, maxTokens: 1 }],
    })),
  };
}

/** Rejects with the first failure: a router that cannot answer these would fail the run too. */
export async function warmUp(target: ReplayOptions): Promise<void> {
  const result = await replay(warmUpTrace(), target);
  const failed = result.requests.find((r) => r.error !== null);
  if (failed) throw new Error(`warm-up request failed (status ${failed.status}): ${failed.error}`);
}
