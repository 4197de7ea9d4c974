import type { DecisionView } from "../metrics/decisions.ts";
import type { GroupMetrics } from "../metrics/group-metrics.ts";
import type { KeyMetrics } from "../metrics/key-counters.ts";
import type { GroupStatus } from "../routing/protocol.ts";

/**
 * A sharded group seen whole: what each of its objects answered, as one group's. Each backend
 * belongs to one shard, so backends are listed side by side; counts add up. A virtual key counted
 * by several shards is counted by each (keys and pending rows are per object, summed).
 */
export function mergeStatus(parts: readonly GroupStatus[]): GroupStatus {
  const [first] = parts as [GroupStatus, ...GroupStatus[]];
  if (parts.length === 1) return first;
  const versions: string[] = [];
  for (const p of parts) for (const v of p.versions) if (!versions.includes(v)) versions.push(v);
  const sum = (f: (p: GroupStatus) => number) => parts.reduce((n, p) => n + f(p), 0);
  return {
    group: first.group,
    strategy: parts.find((p) => p.strategy !== "")?.strategy ?? "",
    versions,
    rev: Math.max(...parts.map((p) => p.rev)),
    leases: sum((p) => p.leases),
    calls: { route: sum((p) => p.calls.route), release: sum((p) => p.calls.release) },
    tenants: { keys: sum((p) => p.tenants.keys), pendingUsageRows: sum((p) => p.tenants.pendingUsageRows) },
    restored: { breakers: sum((p) => p.restored.breakers), affinityBlocks: sum((p) => p.restored.affinityBlocks), leases: sum((p) => p.restored.leases) },
    backends: parts.flatMap((p) => p.backends),
  };
}

/** The group's series from its shards: backends side by side, a key's counts added over the shards that counted it. */
export function mergeMetrics(parts: readonly GroupMetrics[]): GroupMetrics {
  const [first] = parts as [GroupMetrics, ...GroupMetrics[]];
  if (parts.length === 1) return first;
  const keys = new Map<string, KeyMetrics>();
  for (const p of parts) {
    for (const k of p.keys) {
      const had = keys.get(k.id);
      keys.set(k.id, had ? addKey(had, k) : k);
    }
  }
  return {
    group: first.group,
    backends: parts.flatMap((p) => p.backends),
    keys: [...keys.values()],
    refusals: {
      "no-backend": parts.reduce((n, p) => n + p.refusals["no-backend"], 0),
      "at-capacity": parts.reduce((n, p) => n + p.refusals["at-capacity"], 0),
    },
  };
}

function addKey(a: KeyMetrics, b: KeyMetrics): KeyMetrics {
  const tokens: KeyMetrics["tokens"] = { prompt: a.tokens.prompt + b.tokens.prompt, completion: a.tokens.completion + b.tokens.completion, cached: a.tokens.cached + b.tokens.cached };
  const limitHits = { ...a.limitHits };
  for (const [name, n] of Object.entries(b.limitHits) as [keyof KeyMetrics["limitHits"], number][]) limitHits[name] = (limitHits[name] ?? 0) + n;
  return { id: a.id, requests: a.requests + b.requests, tokens, limitHits };
}

/** The shards' last decisions as one list, newest first, as long as the longest shard's. */
export function mergeDecisions(parts: readonly DecisionView[][]): DecisionView[] {
  if (parts.length === 1) return parts[0] as DecisionView[];
  const keep = Math.max(0, ...parts.map((p) => p.length));
  return parts
    .flat()
    .sort((a, b) => (a.at < b.at ? 1 : a.at > b.at ? -1 : 0))
    .slice(0, keep);
}
