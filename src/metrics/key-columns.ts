import type { LimitName } from "../routing/protocol.ts";
import type { GroupMetrics } from "./group-metrics.ts";
import type { KeyMetrics } from "./key-counters.ts";

/**
 * Virtual keys' counters as a routing object answers a scrape: their ids, and per key the numbers
 * of KEY_COLUMNS in that order. A routing object counts up to 10,000 keys, and an answer of that
 * many objects (each with its nested tokens and limit hits) is cloned one by one on the object's
 * one thread while its route calls wait: 15–35 ms a scrape on a busy 2-core machine, where an
 * array of ids and one Float64Array took 2–10 ms, built and cloned.
 */
export interface KeyColumns {
  ids: string[];
  values: Float64Array;
}

/**
 * Every limit, a column each. An object keyed by LimitName, so a limit added there is a compile
 * error here until it has its column: a list alone would let its hits drop out of /metrics unseen.
 */
const LIMIT_COLUMNS = { rpm: true, tpm: true, parallel: true, budget: true } as const satisfies Record<LimitName, true>;
const LIMITS = Object.keys(LIMIT_COLUMNS) as LimitName[];
/** Per key, in this order: requests, prompt, completion and cached tokens, estimated requests, then its hits of each limit. */
const KEY_COLUMNS = 5 + LIMITS.length;

/** `m` to send: its keys (and those of the counts handed over to it) as columns. */
export function packKeys(m: GroupMetrics): GroupMetrics {
  const { keys, handedOver, ...rest } = m;
  return { ...rest, keys: [], keyColumns: columnsOf(keys), ...(handedOver ? { handedOver: handedOver.map((h) => ({ object: h.object, metrics: packKeys(h.metrics) })) } : {}) };
}

/** `m` as received: its keys as a list again. An object of an earlier release sends the list itself. */
export function unpackKeys(m: GroupMetrics): GroupMetrics {
  const { keyColumns, handedOver, ...rest } = m;
  const keys = keyColumns ? keysOf(keyColumns) : m.keys;
  return { ...rest, keys, ...(handedOver ? { handedOver: handedOver.map((h) => ({ object: h.object, metrics: unpackKeys(h.metrics) })) } : {}) };
}

function columnsOf(keys: readonly KeyMetrics[]): KeyColumns {
  const values = new Float64Array(keys.length * KEY_COLUMNS);
  let at = 0;
  for (const k of keys) {
    values[at++] = k.requests;
    values[at++] = k.tokens.prompt;
    values[at++] = k.tokens.completion;
    values[at++] = k.tokens.cached;
    values[at++] = k.estimated ?? 0;
    for (const limit of LIMITS) values[at++] = k.limitHits[limit] ?? 0;
  }
  return { ids: keys.map((k) => k.id), values };
}

function keysOf({ ids, values }: KeyColumns): KeyMetrics[] {
  return ids.map((id, i) => {
    let at = i * KEY_COLUMNS;
    const next = () => values[at++] as number;
    const k: KeyMetrics = { id, requests: next(), tokens: { prompt: next(), completion: next(), cached: next() }, estimated: next(), limitHits: {} };
    // Only the limits hit, as the object counts them: a limit's series comes once it has been.
    for (const limit of LIMITS) {
      const hits = next();
      if (hits > 0) k.limitHits[limit] = hits;
    }
    return k;
  });
}
