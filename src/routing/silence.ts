/**
 * Whether a non-streamed answer that did not come within the group's nonStreamTimeoutMs was its
 * backend's failure. Alone, such a timeout says nothing: the whole generation comes at once, and
 * a request may be slow because of its own max_tokens. But a wedged server (a hung vLLM or
 * llama.cpp engine behind a live HTTP server, whose health endpoint still says ok) answers no
 * request at all, and without a verdict it would keep its share of the non-streamed traffic for
 * ever, each request waiting out the timeout. The timeout is the backend's when
 *  - the backend served nothing (no answer, no streamed first token, to any request) from the
 *    moment this request was sent to its timeout: one that answers others meanwhile is working,
 *    and the slow one is the request's; and
 *  - another backend of the group served a request in that time or in the timeout's length
 *    before it: the same traffic is being answered elsewhere, so the silence is not the
 *    workload's (a whole group given generations longer than its timeout blames no one).
 * A lone timeout of a long generation on an otherwise idle backend is one failure; the breaker
 * opens only at `consecutiveFailures` of them with nothing served between.
 */

/** What the rule reads of a backend: when it last served a request (epoch ms; −Infinity: never, as this object knows). */
export interface Served {
  servedAt: number;
}

/**
 * `b`'s request, sent at `sentAt` (NaN when unknown: no verdict), was cut by the group's
 * nonStreamTimeoutMs `timeoutMs`; `group` holds `b` and the backends beside it (a shard's);
 * `othersServedAt`: when a backend of the group's other shards last served, as the Worker saw.
 */
export function silentWhileOthersServe(b: Served, sentAt: number, timeoutMs: number, group: readonly Served[], othersServedAt = -Infinity): boolean {
  if (!(b.servedAt < sentAt)) return false;
  const since = sentAt - timeoutMs;
  if (othersServedAt >= since) return true;
  for (const other of group) if (other !== b && other.servedAt >= since) return true;
  return false;
}
