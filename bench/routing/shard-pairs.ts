import { ascending, mean, median } from "../stats/quantiles.ts";
import { kvgateRouter } from "./matrix.ts";

/** What a run of one point needs for the comparison: its router, its seed, its kv_hit. */
export interface SeededKvHit {
  strategy: string;
  seed: number;
  kv_hit: number | null;
}

/** One sharded router's kv_hit against one object's at the same point, seed by seed. */
export interface ShardPair {
  router: string;
  /** kv_hit over shards ÷ one object's − 1, per seed both ran, in seed order. */
  changes: number[];
  /** The lower middle of an even count, as every median of bench/ (bench/stats/quantiles.ts). */
  median: number | null;
  /** Beside the median: with few seeds spread both ways, the middle ones alone say little. */
  mean: number | null;
}

const ONE_OBJECT = "prefix-aware";

/**
 * Issue 15's comparison for one point: each `prefix-aware@N` against `prefix-aware` on the same
 * seed — the same traffic — so a change is not one seed's traffic against another's. Medians of
 * each side over seeds would mix those: on Mooncake the seeds are different slices of the hour,
 * whose kv_hit differs by more than what sharding changes.
 */
export function shardPairs(runs: readonly SeededKvHit[]): ShardPair[] {
  const base = new Map<number, number>();
  for (const r of runs) if (r.strategy === ONE_OBJECT && r.kv_hit !== null && r.kv_hit > 0) base.set(r.seed, r.kv_hit);
  const routers = [...new Set(runs.map((r) => r.strategy))].filter((s) => (kvgateRouter(s)?.shards ?? 1) > 1).sort((a, b) => (kvgateRouter(a)?.shards ?? 0) - (kvgateRouter(b)?.shards ?? 0));
  return routers.map((router) => {
    const changes = runs
      .filter((r) => r.strategy === router && r.kv_hit !== null && base.has(r.seed))
      .sort((a, b) => a.seed - b.seed)
      .map((r) => (r.kv_hit as number) / (base.get(r.seed) as number) - 1);
    return { router, changes, median: median(changes), mean: changes.length === 0 ? null : mean(changes) };
  });
}

/** A change in percent to one decimal, signed; one that rounds to zero is "0.0%". */
function pct(x: number): string {
  const tenths = Math.round(x * 1000);
  return `${tenths > 0 ? "+" : tenths < 0 ? "−" : ""}${(Math.abs(tenths) / 10).toFixed(1)}%`;
}

/** The median of an odd count; of an even one both middle changes, since the lower (the median's rule) alone may carry a sign the other does not. */
function middle(p: ShardPair): string {
  const lower = pct(p.median as number);
  if (p.changes.length % 2 === 1) return `median ${lower}`;
  return `median between ${lower} and ${pct(ascending(p.changes)[p.changes.length >> 1] as number)}`;
}

/** The comparison in words, for routing.md; null when the point has no sharded runs beside one object's. */
export function shardPairsLine(runs: readonly SeededKvHit[]): string | null {
  const pairs = shardPairs(runs).filter((p) => p.changes.length > 0);
  if (pairs.length === 0) return null;
  const parts = pairs.map((p) => `${p.router} ${middle(p)}, mean ${pct(p.mean as number)} (per seed ${p.changes.map(pct).join(", ")})`);
  return `kv_hit over shards against one object's (\`prefix-aware\`), paired by seed: ${parts.join("; ")}.`;
}
