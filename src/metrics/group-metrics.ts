import type { BreakerState } from "../routing/breaker.ts";
import type { BackendMetrics, Outcome } from "./backend-counters.ts";
import type { HistogramSnapshot } from "./histogram.ts";
import type { KeyColumns } from "./key-columns.ts";
import type { KeyMetrics } from "./key-counters.ts";
import type { Labels, MetricFamily } from "./prometheus-text.ts";
import { FAILURE_KINDS } from "../upstream/answer.ts";

/** A group's counters as its routing object answers `metrics()`: what `GET /metrics` renders. */
export interface GroupMetrics {
  group: string;
  /** Every backend the object keeps state for (see GroupRouter.snapshot); a deployment id may come more than once (scrapedGroup makes it one series). */
  backends: BackendMetrics[];
  keys: KeyMetrics[];
  /** `keys` as a routing object sends them (src/metrics/key-columns.ts), `keys` then empty; none once received. */
  keyColumns?: KeyColumns;
  /** Route calls that found no backend to give. */
  refusals: { "no-backend": number; "at-capacity": number };
  /**
   * What the objects of shards the group gave up counted, handed to this object (the group's own)
   * once they had nothing in flight (GroupRouter.adopt), by object name. The registry then stops
   * listing those objects, so these counts carry their series; while one of them still answers,
   * its own answer counts instead (scrapedGroup).
   */
  handedOver?: HandedOver[];
}

/** One retired object's counts, as it handed them over (ModelGroupRpc.handOver). */
export interface HandedOver {
  object: string;
  metrics: GroupMetrics;
}

/** What one routing object counted (its own, or what one of a shard the group gave up handed it over): one series per counter. */
export interface ObjectCounts {
  /** The shard whose object counted them; 0 is the group's own object. */
  shard: number;
  metrics: GroupMetrics;
}

/** A group as one scrape read its objects (src/sharding/merge.ts, scrapedGroup). */
export interface ScrapedGroup {
  group: string;
  /** One entry per deployment, its objects' entries merged: what the gauges show it is now. */
  backends: BackendMetrics[];
  /** Each object's counts apart: the counters and histograms. */
  counts: ObjectCounts[];
  /**
   * The group has more than one routing object (shards, or shards it gave up whose counts are still
   * shown): every counter's series then names its object's shard, the group's own "0".
   */
  sharded: boolean;
}

const BREAKER_GAUGE: Record<BreakerState, number> = { closed: 0, "half-open": 1, open: 2 };
const OUTCOMES: readonly Outcome[] = ["ok", "upstream-error", "rejected", "client-abort", "rate-limited", "expired"];
const BREAKER_STATES: readonly BreakerState[] = ["closed", "half-open", "open"];

type Sample = { labels: Labels; value: number };

/**
 * The families `GET /metrics` serves, from the groups' answers. `unreachable`: groups an object of
 * which did not answer this scrape (their `kvgate_group_up` is 0; a sharded one may still be in
 * `groups`, with its other objects' series). Every name and label of the exposition is here, in
 * one place.
 *
 * A counter's or histogram's series is one routing object's. A sharded group's have a `shard`
 * label, its own object's "0" too: a series without one is the whole of a group of one object (a
 * sharded group's unlabelled series were once the sum over its objects; its own object's part
 * under that name would have fallen silently at the upgrade, where a new series shows the change).
 * A sum over objects would fall by one object's part when that object restarts (an eviction, the
 * runtime moving it) or does not answer, and Prometheus reads any fall as a reset to
 * 0, so rate() and increase() would count the other objects' totals again. One object's series
 * falls only to what it counted since, a reset Prometheus reads right; one that did not answer is
 * missing from that scrape. Gauges say what is now: one series per deployment.
 */
export function metricFamilies(groups: readonly ScrapedGroup[], unreachable: readonly string[] = []): MetricFamily[] {
  return [...familyByFamily(groups, unreachable)];
}

/**
 * metricFamilies' families in the same order, each made when the one before has been taken: what
 * `GET /metrics` streams (src/metrics/scrape-response.ts). A scrape has a series per key per
 * object that counted it (up to 10,000 an object, 80,000 for a group of 8 shards), and every
 * family's samples at once, with the whole text, took ~2 KB of heap a key series: 164 MB at 80,000,
 * past a Worker's 128 MB. One family's samples at a time, and a key's labels made once for its
 * six families (not once each), take ~0.3 KB (test/unit/scrape-memory.test.ts).
 */
export function* familyByFamily(groups: readonly ScrapedGroup[], unreachable: readonly string[] = []): Generator<MetricFamily> {
  /** `labels` (the group's first), then, in a sharded group, the object's shard. */
  const ofObject = (g: ScrapedGroup, c: ObjectCounts, labels: Labels): Labels => (g.sharded ? { ...labels, shard: String(c.shard) } : labels);
  const perObject = <T>(items: (m: GroupMetrics) => readonly T[], idLabels: (x: T) => Labels): { x: T; labels: Labels }[] =>
    groups.flatMap((g) => g.counts.flatMap((c) => items(c.metrics).map((x) => ({ x, labels: ofObject(g, c, { group: g.group, ...idLabels(x) }) }))));
  const backends = perObject(
    (m) => m.backends,
    (b) => ({ backend: b.id }),
  );
  const perBackend = (f: (b: BackendMetrics, labels: Labels) => Sample[]): Sample[] => backends.flatMap(({ x, labels }) => f(x, labels));
  const one = (value: (b: BackendMetrics) => number) => perBackend((b, labels) => [{ labels, value: value(b) }]);
  const now = (value: (b: BackendMetrics) => number) => groups.flatMap((g) => g.backends.map((b) => ({ labels: { group: g.group, backend: b.id }, value: value(b) })));
  const counter = (name: string, help: string, samples: Sample[]): MetricFamily => ({ name, help, type: "counter", samples });
  const gauge = (name: string, help: string, samples: Sample[]): MetricFamily => ({ name, help, type: "gauge", samples });
  const histogram = (name: string, help: string, of: (b: BackendMetrics) => HistogramSnapshot): MetricFamily => ({
    name,
    help,
    type: "histogram",
    samples: backends.map(({ x, labels }) => ({ labels, histogram: of(x) })),
  });
  yield gauge("kvgate_group_up", "1 when the routing object of each of the group's shards answered this scrape, 0 when one did not (the series it holds are then missing; a sharded group's other shards' still come). The object of a shard it gave up that does not answer, before it has handed over its counts, leaves the group 1 and its counters' series missing from that scrape.", [
    ...groups.filter((g) => !unreachable.includes(g.group)).map((g) => ({ labels: { group: g.group }, value: 1 })),
    ...unreachable.map((group) => ({ labels: { group }, value: 0 })),
  ]);
  yield counter(
    "kvgate_requests_total",
    "Attempts on a backend that ended, by outcome: ok, upstream-error, rejected (the request's own fault), client-abort (the client left, or the gateway's deadline), rate-limited, expired (its Worker stopped renewing the lease). A request that failed over counts once on each backend it tried.",
    perBackend((b, labels) => OUTCOMES.map((outcome) => ({ labels: { ...labels, outcome }, value: b.outcomes[outcome] }))),
  );
  yield counter(
    "kvgate_attempt_failures_total",
    "Attempts on a backend that failed, by what they met: connect (no answer began), timeout (no first byte, or no whole answer, in time), stalled (a stream silent past streamIdleTimeoutMs), broken-off (an answer cut), unavailable (a 503 saying the server's state: a model loading, a queue full), server-error (another 5xx), rate-limited (a 429), credentials (a 401: the engine refused the gateway's key; a 403: a proxy in front of it refused the request, for what it holds or for the gateway's access token — held for the group's word, so no breaker opens and only this series shows a wrong Access token), not-served (model or endpoint not served), bad-answer (what no OpenAI-compatible server sends), unreachable (no attempt: a Worker cannot reach it as configured, a secret or binding its deploy lacks, and passed it over; once a request). Counted whatever the verdict on the backend: a failure a second backend met too is the request's, and opens no breaker.",
    perBackend((b, labels) => FAILURE_KINDS.map((cause) => ({ labels: { ...labels, cause }, value: b.failures?.[cause] ?? 0 }))),
  );
  yield counter(
    "kvgate_routing_decisions_total",
    "Attempts routed to a backend, by the routing reason (prefix-hit, least-loaded, saturated-spill, ...); an attempt that followed a failed one, or went to a fallback group, counts as failover.",
    perBackend((b, labels) => Object.entries(b.reasons).map(([reason, value]) => ({ labels: { ...labels, reason }, value: value ?? 0 }))),
  );
  yield counter("kvgate_failovers_total", "Attempts that followed a failed attempt of the same request, or went to a fallback group, by the backend they went to.", one((b) => b.reasons.failover ?? 0));
  yield gauge("kvgate_requests_in_flight", "Leases in flight on a backend.", now((b) => b.inFlight));
  yield gauge("kvgate_breaker_state", "The backend's circuit breaker: 0 closed, 1 half-open, 2 open.", now((b) => BREAKER_GAUGE[b.breaker]));
  yield counter(
    "kvgate_breaker_transitions_total",
    "Circuit breaker transitions, by the state entered.",
    perBackend((b, labels) => BREAKER_STATES.map((to) => ({ labels: { ...labels, to }, value: b.breakerTransitions[to] }))),
  );
  yield histogram("kvgate_ttft_seconds", "Time from the upstream request to its first body byte (a non-streamed answer: to its headers), per attempt that got one.", (b) => b.ttft);
  yield histogram(
    "kvgate_request_duration_seconds",
    "Time from the upstream request to the end of its body (a non-streamed answer without hooks: to its headers), per attempt whose body was relayed, whatever its outcome.",
    (b) => b.duration,
  );
  yield counter("kvgate_usage_reads_total", "Attempts whose upstream usage the gateway read (a virtual key that counts tokens, or a request sampled for routing feedback): the ones the token counters cover.", one((b) => b.tokens.leases));
  yield counter("kvgate_prompt_tokens_total", "Prompt tokens the upstream reported, where its usage was read.", one((b) => b.tokens.prompt));
  yield counter("kvgate_completion_tokens_total", "Completion tokens the upstream reported, where its usage was read.", one((b) => b.tokens.completion));
  yield counter("kvgate_cached_tokens_total", "Prompt tokens the upstream reported as served from its KV cache (prompt_tokens_details.cached_tokens), where its usage was read.", one((b) => b.tokens.cached));
  yield counter(
    "kvgate_predicted_cached_tokens_total",
    "Prompt tokens routing expected the backend to hold (matched prefix blocks × blockChars / its learned characters per token), over the same attempts as kvgate_cached_tokens_total: their ratio is routing's precision.",
    one((b) => b.tokens.predictedCached),
  );
  yield gauge("kvgate_prefix_set_entries", "Prompt blocks in the backend's prefix set (what routing believes its KV cache holds).", now((b) => b.prefix.entries));
  yield gauge("kvgate_prefix_set_capacity", "Prompt blocks the backend's prefix set may hold.", now((b) => b.prefix.capacity));
  yield gauge("kvgate_prefix_set_bytes", "Memory the backend's prefix set holds in the routing object, in bytes.", now((b) => b.prefix.bytes));
  yield counter(
    "kvgate_cache_reports_total",
    "Attempts whose upstream usage carried its cached-token count (prompt_tokens_details.cached_tokens, 0 included): the ones capacity and prefill-rate learning see.",
    one((b) => b.learned.reports.cached),
  );
  yield gauge("kvgate_learned_chars_per_token", "Characters of the prompt as routing hashes it (blocks × blockChars) per prompt token the backend reported; 4 until a report came.", now((b) => b.learned.charsPerToken));
  yield gauge(
    "kvgate_learned_kv_capacity_blocks",
    "The backend's effective KV capacity in hash blocks, learned from cached tokens it reported against what its prefix set predicted (its kvCapacityBlocks until learned); its prefix set is sized by it.",
    now((b) => b.learned.kvCapacityBlocks),
  );
  yield gauge(
    "kvgate_learned_prefill_tokens_per_second",
    "The backend's prefill rate, learned from the TTFT of streamed answers and the prompt tokens they did not find cached (its prefillTokensPerSec until learned); the prefill-debt drain uses it.",
    now((b) => b.learned.prefillTokensPerSec),
  );
  yield counter(
    "kvgate_route_refusals_total",
    "Route calls that found no backend: no-backend (every one failing, open or already tried), at-capacity (every one at its in-flight limit).",
    groups.flatMap((g) => g.counts.flatMap((c) => (["no-backend", "at-capacity"] as const).map((refused) => ({ labels: { ...ofObject(g, c, { group: g.group }), refused }, value: c.metrics.refusals[refused] })))),
  );
  // A key's labels, made once for its families, when the first of them is reached.
  const keys = perObject(
    (m) => m.keys,
    (k) => ({ key: k.id }),
  );
  const perKey = (f: (k: KeyMetrics, labels: Labels) => Sample[]): Sample[] => keys.flatMap(({ x, labels }) => f(x, labels));
  const ofKey = (value: (k: KeyMetrics) => number): Sample[] => keys.map(({ x, labels }) => ({ labels, value: value(x) }));
  yield counter("kvgate_key_requests_total", "Requests of a virtual key (by its id) that got a backend; a failover is not counted again.", ofKey((k) => k.requests));
  yield counter("kvgate_key_prompt_tokens_total", "Prompt tokens of a virtual key's requests, as the upstream reported them (estimated where it never did: src/tenants/estimate.ts).", ofKey((k) => k.tokens.prompt));
  yield counter("kvgate_key_completion_tokens_total", "Completion tokens of a virtual key's requests, as the upstream reported them (estimated where it never did: src/tenants/estimate.ts).", ofKey((k) => k.tokens.completion));
  yield counter("kvgate_key_cached_tokens_total", "Cached prompt tokens of a virtual key's requests, as the upstream reported them.", ofKey((k) => k.tokens.cached));
  yield counter("kvgate_key_estimated_requests_total", "Requests of a virtual key whose tokens were estimated: the upstream never reported them (the client left, the request's total timeout cut the answer, or the server sends no usage).", ofKey((k) => k.estimated ?? 0));
  yield counter(
    "kvgate_key_limit_hits_total",
    "Requests of a virtual key refused with a 429 for a limit: rpm, tpm, parallel, budget.",
    perKey((k, labels) => Object.entries(k.limitHits).map(([limit, value]) => ({ labels: { ...labels, limit }, value: value ?? 0 }))),
  );
}
