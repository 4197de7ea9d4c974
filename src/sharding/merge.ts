import type { DecisionView } from "../metrics/decisions.ts";
import type { BackendMetrics } from "../metrics/backend-counters.ts";
import type { GroupMetrics, ObjectCounts, ScrapedGroup } from "../metrics/group-metrics.ts";
import type { HistogramSnapshot } from "../metrics/histogram.ts";
import type { BackendSnapshot, GroupStatus } from "../routing/protocol.ts";
import { shardOfObject } from "./partition.ts";

/**
 * A sharded group seen whole: what each of its objects answered, as one group's. Each backend
 * belongs to one shard, so backends are listed side by side (once each); counts add up. A virtual key counted
 * by several shards is counted by each (keys and pending rows are per object, summed).
 */
export function mergeStatus(parts: readonly GroupStatus[]): GroupStatus {
  const [first] = parts as [GroupStatus, ...GroupStatus[]];
  if (parts.length === 1) return { ...first, backends: oncePerId(first.backends, addStatus) };
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
    backends: oncePerId(
      parts.flatMap((p) => p.backends),
      addStatus,
    ),
    ...(parts.some((p) => p.inFlightKnown === false) ? { inFlightKnown: false as const } : {}),
  };
}

/**
 * One deployment listed twice, by two shards or by one object at two addresses: what it is now
 * (breaker, prefix set, TTFT average, what it learned, whether it takes requests) is the entry's
 * that takes requests (else the first, the newest version's); what both did adds up, as /metrics
 * adds it — their requests, tokens, and the requests and prefill work both have in flight.
 */
function addStatus(a: BackendSnapshot, b: BackendSnapshot): BackendSnapshot {
  const [live, old] = b.takesRequests && !a.takesRequests ? [b, a] : [a, b];
  return {
    ...live,
    inFlight: live.inFlight + old.inFlight,
    prefillDebtBlocks: live.prefillDebtBlocks + old.prefillDebtBlocks,
    completed: live.completed + old.completed,
    failed: live.failed + old.failed,
    rejected: live.rejected + old.rejected,
    aborted: live.aborted + old.aborted,
    expired: live.expired + old.expired,
    usage: { prompt: live.usage.prompt + old.usage.prompt, cached: live.usage.cached + old.usage.cached },
  };
}

/**
 * A backend is listed by one shard, except for a while after it moved to another (the group's
 * shards or deployments changed): the shard it left keeps it until its leases there end and its
 * older config versions are let go. Listed once, its two entries combined by `combine`.
 */
function oncePerId<T extends { id: string }>(all: readonly T[], combine: (a: T, b: T) => T): T[] {
  const byId = new Map<string, T>();
  for (const x of all) {
    const had = byId.get(x.id);
    byId.set(x.id, had ? combine(had, x) : x);
  }
  return [...byId.values()];
}

/**
 * A group as one scrape read its objects (its shards', then those of shards it gave up; `objects`:
 * the names of the objects that gave `answers`; `shards`: how many shards the group has now). Its
 * counts stay each object's own (metricFamilies: one series per object), and the counts an object
 * handed over (GroupMetrics.handedOver) are that object's unless it answered itself, with its
 * counts as they are now (the same, or more), or is one of the group's shards again: it counts on
 * from where it was, so the copy is older, and a scrape it does not answer leaves its series out
 * (a counter that fell would be counted again as a reset). The gauges' view lists each deployment once: a deployment one
 * object lists twice — the same id at its old and new address, while a version that routed to the
 * old one is kept — and one two objects list (it moved shards) are combined. `sharded`: the group
 * has more than one routing object (routingObjectNames), whether they answered or not; a group
 * whose own object carries counts handed over is sharded too. Neither turns on which objects
 * answered this scrape, so a series does not lose or gain its shard label from one scrape to the next.
 */
export function scrapedGroup(group: string, answers: readonly GroupMetrics[], objects: readonly string[], sharded: boolean, shards: number): ScrapedGroup {
  const answered = new Set(objects);
  const handed = new Map<string, GroupMetrics>();
  for (const a of answers) for (const h of a.handedOver ?? []) if (!answered.has(h.object) && shardOfObject(h.object).shard >= shards) handed.set(h.object, h.metrics);
  const own = answers.map(({ handedOver: _, ...metrics }, i): [string, GroupMetrics] => [objects[i] as string, metrics]);
  // One object's two addresses of a deployment are one series of that object's: counted by one object, they fall together.
  const counts = [...own, ...handed].map(([object, m]): ObjectCounts => ({ shard: shardOfObject(object).shard, metrics: { ...m, backends: oncePerId(m.backends, addAddress) } }));
  return {
    group,
    backends: oncePerId(
      counts.flatMap((c) => c.metrics.backends),
      addObject,
    ),
    counts,
    sharded: sharded || handed.size > 0,
  };
}

/**
 * One deployment listed by two objects: one routes for it now (BackendMetrics.current), and the
 * other — a shard the group gave up, which probes it no more, or one it moved from — adds its counts
 * and requests in flight; two alike (a change on its way to one of them) add up as two shards'.
 */
function addObject(a: BackendMetrics, b: BackendMetrics): BackendMetrics {
  const [x, y] = [isCurrent(a), isCurrent(b)];
  if (x === y) return addBackend(a, b);
  return x ? addAddress(a, b) : addAddress(b, a);
}

/** An object of the release before `current` (a deploy's Workers and objects change apart) says nothing: it routed for all it listed. */
const isCurrent = (b: BackendMetrics): boolean => b.current !== false;

const BREAKER_WORSE: Record<BackendMetrics["breaker"], number> = { closed: 0, "half-open": 1, open: 2 };

/**
 * One backend's series from the two shards that count it: counts and histograms add up (each
 * shard counted its own requests), as do in-flight requests and prefix-set memory; its breaker is
 * the worse of the two, and what it learned is the entry with more reports (the reports themselves
 * added up, as a counter).
 */
function addBackend(a: BackendMetrics, b: BackendMetrics): BackendMetrics {
  const add = <K extends string>(x: Partial<Record<K, number>>, y: Partial<Record<K, number>>): Record<K, number> => {
    const out = { ...x } as Record<K, number>;
    for (const k of Object.keys(y) as K[]) out[k] = (out[k] ?? 0) + (y[k] ?? 0);
    return out;
  };
  const histogram = (x: HistogramSnapshot, y: HistogramSnapshot): HistogramSnapshot => ({ bounds: x.bounds, cumulative: x.cumulative.map((n, i) => n + (y.cumulative[i] ?? 0)), sum: x.sum + y.sum, count: x.count + y.count });
  return {
    id: a.id,
    current: isCurrent(a) || isCurrent(b),
    inFlight: a.inFlight + b.inFlight,
    breaker: BREAKER_WORSE[b.breaker] > BREAKER_WORSE[a.breaker] ? b.breaker : a.breaker,
    breakerTransitions: add(a.breakerTransitions, b.breakerTransitions),
    outcomes: add(a.outcomes, b.outcomes),
    // An object of the release before this family counted none.
    failures: add(a.failures ?? {}, b.failures ?? {}),
    reasons: add(a.reasons, b.reasons),
    ttft: histogram(a.ttft, b.ttft),
    duration: histogram(a.duration, b.duration),
    tokens: add(a.tokens, b.tokens),
    prefix: { entries: a.prefix.entries + b.prefix.entries, capacity: a.prefix.capacity + b.prefix.capacity, bytes: a.prefix.bytes + b.prefix.bytes },
    learned: { ...(b.learned.reports.usage > a.learned.reports.usage ? b.learned : a.learned), reports: add(a.learned.reports, b.learned.reports) },
  };
}

/**
 * One deployment at its new address and its old one, in one object (the newest version's entry
 * first): what both did adds up, and what it is now — its breaker, prefix set, what it learned —
 * is the new address's (the old one is usually a restarted server's, its breaker open).
 */
export function addAddress(now: BackendMetrics, before: BackendMetrics): BackendMetrics {
  const both = addBackend(now, before);
  return { ...both, breaker: now.breaker, prefix: now.prefix, learned: { ...now.learned, reports: both.learned.reports } };
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
