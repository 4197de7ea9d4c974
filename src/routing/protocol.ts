import type { ResolvedGroup } from "../config/load.ts";
import type { DecisionView } from "../metrics/decisions.ts";
import type { GroupMetrics, HandedOver } from "../metrics/group-metrics.ts";
import type { FailureKind } from "../upstream/answer.ts";
import type { BudgetPeriod, Spent } from "../tenants/protocol.ts";
import type { BreakerSnapshot } from "./breaker.ts";
import type { LearnedSnapshot } from "./feedback.ts";
import type { RouteReason } from "./policy.ts";

/**
 * What the Worker and a model group's Durable Object say to each other. Both sides import this
 * file and nothing of each other.
 *
 * Backends are named by id, and every route call carries the caller's config version: the object
 * routes with that version's settings and backends, so during a deploy an old Worker and a new
 * one each get a backend of their own config, whichever code the object runs. An object that does
 * not know the version answers `unknown-version`, and the Worker sends the call again with the
 * group's config attached: only the first call of a version to an object carries it.
 *
 * Either side may be of an earlier release than the other while a deploy propagates: a field
 * one adds is optional, and the other side, not knowing it, does what it did before.
 */

/**
 * How an attempt on a backend ended. ok and upstream-error count for the backend's breaker;
 * rejected (the request's own fault: a 4xx, or a failure that followed the request to another
 * backend), rate-limited and client-abort (the client left, or the gateway's own deadline) do not.
 */
export type LeaseOutcome = "ok" | "upstream-error" | "rejected" | "client-abort" | "rate-limited";

export interface LeaseRelease {
  lease: string;
  outcome: LeaseOutcome;
  /** Time from the upstream request to its first body byte (a non-streamed answer's headers), when one arrived. */
  ttftMs?: number;
  /** Time from the upstream request to the end of its body, for an attempt that was answered. */
  durationMs?: number;
  /** The upstream's own usage, when the Worker read it (a virtual key that counts tokens, or a request sampled for feedback). */
  usage?: TokenUsage;
  /** The answer was streamed: ttftMs is its first token's, a measure of its prefill (src/routing/learned/prefill-rate.ts). */
  streamed?: boolean;
  /**
   * The attempt's bound passed with no answer from its backend. With a client-abort: the group's
   * nonStreamTimeoutMs cut a non-streamed attempt, and the routing object judges whether the
   * silence was the backend's (src/routing/silence.ts). With an upstream-error: a stream's first
   * token did not come within firstByteTimeoutMs. Either silence, once the backend's, is one no
   * good health probe undoes (src/routing/breaker.ts).
   */
  timedOut?: true;
  /**
   * With a release the silence rule judges (src/routing/silence.ts judgedBySilence), in a sharded
   * group: when a backend of another shard last served (an answer, a streamed first token), as the
   * Worker saw (epoch ms). A shard's object sees only its own backends (src/sharding/served-elsewhere.ts).
   */
  othersServedAt?: number;
  /** A rate-limited attempt's wait, in ms, as its upstream's Retry-After said. */
  retryAfterMs?: number;
  /**
   * A failed attempt answered a gateway's 502 or 504: a proxy in front of the engine (a tunnel,
   * nginx, an ingress) could not get an answer from it, which no request's content makes an engine's
   * own answer (src/routing/silence.ts judgedBySilence).
   */
  viaGateway?: true;
  /** A failed attempt: what it met (kvgate_attempt_failures_total). Sent with failures only, whatever the verdict. */
  failure?: FailureKind;
  /**
   * In place of `usage`, for a virtual key that counts tokens, when the upstream's usage never
   * came for an answer that began (its client left, or it reported none): what the key is charged
   * is estimated from these (src/tenants/estimate.ts).
   */
  estimate?: UsageEstimate;
  /**
   * Sent with a virtual key's usage or estimate only: the key and the backend it is for, so an
   * object that does not hold the lease (it restarted since, or the lease expired first) still
   * records it. Not with the usage of a key whose usage is not recorded (RouteTenant.recordsUsage),
   * read for routing's feedback alone.
   */
  key?: string;
  backendId?: string;
  /** As a renewal's (LeaseRenewal.charged): what of `usage` was charged already, for an object that does not hold the lease. */
  charged?: TokenUsage;
}

/** What an answer the upstream never reported the usage of is charged by (src/tenants/estimate.ts). */
export interface UsageEstimate {
  /** The characters of the prompt's text. */
  chars: number;
  /** The token ids the prompt gave as numbers. */
  tokens: number;
  /** The SSE events that came: a token each. 0 for an answer that is no stream. */
  events: number;
  /**
   * The characters of the text a whole (non-streamed) answer generated: its completion, at the
   * prompt's characters per token. Absent from a stream's estimate (its events count) and from an
   * older Worker's.
   */
  answerChars?: number;
}

export interface TokenUsage {
  prompt: number;
  completion: number;
  /** 0 when the upstream did not report it. */
  cached: number;
  /**
   * The upstream reported its cached tokens (prompt_tokens_details.cached_tokens), 0 included:
   * vLLM sends none without --enable-prompt-tokens-details. Absent (an older Worker): not reported.
   */
  cacheReported?: boolean;
}

/**
 * A lease its Worker still holds (sent every leaseTtlMs / 3 while it does, and at once to an object
 * that answers as another incarnation than before: leaseId). The object extends it,
 * or, when it does not know the lease (it restarted since), takes its slot again on the backend
 * the lease names in the version it was routed with.
 */
export interface LeaseRenewal {
  lease: string;
  version: string;
  backendId: string;
  /** The virtual key the lease counts for, if any: an object that restarted counts it again. */
  key?: string;
  /** Sent with `key` when its usage is not recorded (RouteTenant.recordsUsage): a lease taken back charges it nothing. */
  recordsUsage?: false;
  /**
   * A holder that reads its usage as it goes (a realtime session of a key that counts tokens):
   * all it has used so far. The object charges the key what it had not charged yet, so a session
   * that lasts hours spends its key's budget and shows in its usage as it goes, not only at its end.
   */
  usage?: TokenUsage;
  /**
   * What of `usage` an object answered having charged. The object that holds the lease knows what
   * it charged; one that does not (it restarted since) takes this as charged before, and charges
   * the rest: neither what a lost call carried is lost, nor what an older object charged counted twice.
   */
  charged?: TokenUsage;
  /**
   * Sent with `usage` for a key with a budget: the object answers the renewal (release()) with
   * the lease when, charged, the key's spend has reached it.
   */
  budget?: KeyBudget;
  /**
   * Sent with `usage` for a key with a tpm: the object answers the renewal (RenewalAnswers.overTpm)
   * with the lease when, charged, the key's tokens of the last minute here have reached it — a
   * session lasts hours, and its tokens fill the window its requests are held to.
   */
  tpm?: number;
  /**
   * The holder's answer has begun (a stream's first token came): its backend is serving. A stream's
   * release comes only at its end, so without this a backend whose only answers were long streams
   * would look, to the silence rule (src/routing/silence.ts), like one that served nothing.
   */
  serving?: true;
}

/** A routing object's answer to the leases a release() call renewed (LeaseRenewal). */
export interface RenewalAnswers {
  /** Leases whose renewal charged their key's usage and found the budget it carried spent. */
  spent: string[];
  /** Leases whose renewal charged their key's usage and found the tpm it carried reached (not spent: a budget's answer is given first); absent from an object of an earlier release. */
  overTpm?: string[];
  /** Leases it does not hold and could not take back (their version or backend unknown to it): nothing their renewal carried was charged. */
  unheld: string[];
  /** The answering object's incarnation (leaseIncarnation); absent from an object of an earlier release. */
  incarnation?: string;
}

/**
 * A lease's id: the incarnation of the object that gave it — random, drawn when the object starts
 * (after an eviction, a crash, a move or a deploy, another) — a dot, and its number there. Every
 * release of the object has made them so. A Worker reads from a decision's lease which
 * incarnation answered: another than before knows none of the leases the isolate holds there.
 */
export function leaseId(incarnation: string, n: number): string {
  return `${incarnation}.${n.toString(36)}`;
}

/** The incarnation of the object that gave `lease` (leaseId); undefined for an id not made so. */
export function leaseIncarnation(lease: string): string | undefined {
  const dot = lease.indexOf(".");
  return dot > 0 ? lease.slice(0, dot) : undefined;
}

/** What one renewal came to (GroupRouter.renew). */
export type RenewalOutcome = "held" | "spent" | "overTpm" | "unheld";

/** A virtual key's budget per period, and its spend as the Worker last read it from the tenants object. */
export interface KeyBudget {
  tokens: number | null;
  costMicros: number | null;
  period: BudgetPeriod;
  spent: Spent;
}

/**
 * The virtual key a request came with, and what the routing object checks for it before it takes
 * a slot: per-minute windows and in-flight counts of the key in this group, and the key's budget.
 */
export interface RouteTenant {
  id: string;
  rpm: number | null;
  tpm: number | null;
  maxParallel: number | null;
  budget: KeyBudget | null;
  /** A retry or a fallback of a request already admitted: its lease counts, its limits are not checked again. */
  admitted: boolean;
  /**
   * The request got a backend before, in this group or another (a fallback group's call after an
   * attempt in its primary): counted in kvgate_key_requests_total there, not again here, though a
   * fallback group checks and takes the key's limits itself (`admitted` false). False for a fallback
   * group that is the first to give it one (its primary had none). Absent (a Worker of an earlier
   * release): `admitted`.
   */
  counted?: boolean;
  /**
   * Whether the key's usage is recorded (src/tenants/route-tenant.ts readsUsage: usage tracking, a
   * tpm or a budget). False: the lease the call takes charges the key nothing, no usage row and no
   * tokens, though a request its group samples for routing's feedback reads its usage all the same
   * (that usage teaches routing alone); its request counts in kvgate_key_requests_total. Absent (a
   * Worker of an earlier release): recorded.
   */
  recordsUsage?: boolean;
}

export interface RouteCall {
  /** The caller's config version of the group (ResolvedGroup.version). */
  version: string;
  /** The group's config, sent only when the object answered `unknown-version`. */
  group?: ResolvedGroup;
  /** The prompt's block hashes. */
  chain: number[];
  /** The prompt's size in blocks, sent only when the chain stands for part of it, cut at maxPrefixBlocks or `partial` (src/prefix/fingerprint.ts promptBlocks): absent, the chain's length. */
  blocks?: number;
  /**
   * The prompt holds media (an image, audio, a file), each hashed as a fixed number of blocks
   * (src/prefix/media.ts): its chain's characters measure none of its tokens, and its answer
   * teaches no characters per token. Absent (none, or a Worker of an earlier release): false.
   */
  media?: true;
  /**
   * The prompt's usage counts more than its chain reads, whether or not the chain was cut at
   * maxPrefixBlocks: a completions batch's (its chain is the first prompt's), a Responses
   * follow-up's (the stored conversation), a chat's whose template renders a block or more of text
   * the chain leaves out (src/prefix/fingerprint.ts unreadChars). Its answer teaches its backend
   * nothing. Only the Worker can tell such a cut chain from a long prompt's, which teaches capacity.
   * An object of a release before ignores it (it tells a whole chain under more blocks, not a cut
   * one); absent (none, or a Worker of an earlier release): false.
   */
  partial?: true;
  /** Leases this isolate finished since its last call: processed whatever the answer. */
  released: LeaseRelease[];
  renewed: LeaseRenewal[];
  /** Ids of backends this request already failed on. */
  exclude: string[];
  /**
   * Ids of backends the calling Worker cannot reach as configured (a secret or binding its deploy
   * lacks): never picked, and, unlike `exclude`, no failover; those of the object's own counted
   * as a failure of kind `unreachable`, unless `unreachableCounted`. An object of a release before
   * ignores it: its Worker passes over such a pick itself (workers/gateway/group-reach.ts).
   */
  unreachable?: string[];
  /**
   * This object counted `unreachable` for this request already, at an earlier call of it: a shard
   * asked again after it passed the prompt on, a retry after a failed attempt. The Worker says so,
   * as only it knows the request's calls. A Worker of a release before never does: each of its
   * calls counts them.
   */
  unreachableCounted?: true;
  /** The attempt follows a failed one, or serves a fallback group: its lease counts as a failover. */
  failover?: boolean;
  /** The request's virtual key; absent for the master key. */
  tenant?: RouteTenant;
  /** A sharded group's first call: when the object passes the prompt on to the next shard. */
  spill?: SpillLimit;
  /**
   * A shard the prompt was passed on to (`spill`): its refusal for the key's limits, but a budget,
   * is not the request's, whose own shard serves it then; a 429 of the key's is not counted here.
   */
  passedOn?: boolean;
  /**
   * A sharded group's call to a shard with another still to ask: a shard whose every backend that
   * could take the request rests after a 429 passes it on (`spill`), nothing taken, rather than
   * send it to meet the same 429 while another shard may have room; it is asked again last without.
   */
  othersLeft?: boolean;
}

/**
 * A shard's limit on the wait it keeps a prompt for (src/sharding/shard-choice.ts sets it). The
 * object refuses with `spill` when its best backend would keep the prompt waiting longer (its
 * queued prompt work plus the prompt's own uncached blocks) than `overMs`, plus what copying a
 * shared prefix that backend holds onto the next shard would cost (src/routing/copy-cost.ts).
 */
export interface SpillLimit {
  /** What the Worker expects the prompt to wait on the next shard, in ms. */
  overMs: number;
  /** Leading blocks of the prompt every shard is taken to hold (ShardKey.spread): the next has them too, and copies none of them. */
  spreadBlocks: number;
}

export interface RouteDecision {
  backendId: string;
  /** Its id names the answering object's incarnation (leaseId). */
  lease: string;
  reason: RouteReason;
  matched: number;
  total: number;
  /** When the object decided (its clock): breakers are judged against the same clock. */
  routedAt: number;
  /** The highest registry revision the object knows of the group: a Worker behind it refreshes its fleet. */
  rev: number;
  /** Leases the object holds, this one included: a sharded group's Worker weighs its shards' loads by it. */
  inFlight: number;
  /**
   * A shard's answer only (group.shards > 1): the prompt work queued on its least-queued backend
   * after this decision, in ms at that backend's prefill rate, and what one block of prompt takes
   * there. The Worker weighs its shards by them (src/sharding/shard-choice.ts).
   */
  waitMs?: number;
  blockMs?: number;
  /** The request's `priority` for a backend that orders its queue by it (src/routing/engine-priority.ts); absent for any other. */
  priority?: number;
}

/**
 * Why a route call found no backend: all breaker-open or already tried, or all at their cap; or,
 * for a call that set `spill`, that the prompt would wait longer than that on the best of
 * them, or for one that set `othersLeft`, that every one that could take it rests after a 429
 * (nothing was taken: the Worker asks the next shard).
 */
export interface RouteRefusal {
  refused: "no-backend" | "at-capacity" | "spill";
  rev: number;
}

export type LimitName = "rpm" | "tpm" | "parallel" | "budget";

/** The request's key is over one of its limits: nothing was taken, no backend was asked. */
export interface LimitRefusal {
  refused: "limited";
  limit: LimitName;
  /** When trying again can succeed; null when it cannot within the key's budget period (a total budget). */
  retryAfterMs: number | null;
  rev: number;
}

/** The object does not know the call's version: send it again with the group attached. */
export interface VersionRefusal {
  refused: "unknown-version";
  rev: number;
}

export function isVersionRefusal(x: RouteDecision | RouteRefusal | LimitRefusal | VersionRefusal): x is VersionRefusal {
  return "refused" in x && x.refused === "unknown-version";
}

export interface BackendSnapshot {
  id: string;
  /** The newest version names it active: it gets new requests (draining, disabled or removed ones do not). */
  takesRequests: boolean;
  inFlight: number;
  prefixBlocks: number;
  /** Prefix-set entries it may hold: kvCapacityBlocks, or its share of the group's prefixBudgetBlocks. */
  prefixCapacity: number;
  completed: number;
  failed: number;
  /** Requests it refused as the request's own fault (4xx), or that failed the same way elsewhere. */
  rejected: number;
  aborted: number;
  expired: number;
  ttftEwmaMs: number | null;
  /** Prompt and cached tokens summed over the releases that carried the upstream's usage (where the gateway read it). */
  usage: { prompt: number; cached: number };
  prefillDebtBlocks: number;
  breaker: BreakerSnapshot;
  /** When its next health probe is due (epoch ms); null while its breaker is closed. */
  nextProbeAt: number | null;
  /**
   * Until when (epoch ms) it asked, with a 429's Retry-After, to be left alone: spared while
   * another backend has room (capped at 60 s). Null when it never asked; a time past is over.
   */
  restingUntil: number | null;
  /** What feedback from the engine taught the router about it (src/routing/feedback.ts), beside what was configured. */
  learned: LearnedSnapshot;
}

/** A group's routing state as its Durable Object holds it (GET /v1/kvgate/status). */
export interface GroupStatus {
  group: string;
  /** The strategy of the newest version the object knows; "" before its first call. */
  strategy: string;
  /** The config versions the object routes for, newest first. */
  versions: string[];
  /** The highest registry revision of the group the object knows. */
  rev: number;
  leases: number;
  /** RPCs this object served since it started: what benchmarks divide by requests. */
  calls: { route: number; release: number };
  /** Virtual keys this object counts for (by id), and usage rows waiting for the next batch to the tenants object. */
  tenants: { keys: number; pendingUsageRows: number };
  /**
   * Routing state this object found in storage when it started (after an eviction or restart),
   * and the leases it took back from their Workers' renewals since.
   */
  restored: { breakers: number; affinityBlocks: number; leases: number };
  /** Every backend it keeps state for: the newest version's in its order, then any other version's. */
  backends: BackendSnapshot[];
  /**
   * False for leaseTtlMs after the object restarted (an eviction, a deploy): requests may run that
   * it learns of only from their leases' renewals, so its in-flight counts may be short. Absent
   * once they are the truth (and from an object of a release before this field).
   */
  inFlightKnown?: false;
}

/**
 * A group's revision and deployment ids, as a Worker's fleet has them. A routing object lists
 * what its config versions name, and the object of a shard the group gave up keeps its last
 * version for good: a deployment the group no longer has is left out, but while requests are in
 * flight on it there, and only when the caller's revision is not behind the object's.
 */
export interface GroupIds {
  rev: number;
  ids: string[];
}

/** The group's Durable Object, as the Worker calls it. */
export interface ModelGroupRpc {
  /** Processes `released` and `renewed`, then picks a backend of the caller's version and takes its slot. */
  route(call: RouteCall): RouteDecision | RouteRefusal | LimitRefusal | VersionRefusal;
  /** Finished and held leases of an isolate with no route call to carry them. */
  release(released: LeaseRelease[], renewed: LeaseRenewal[]): RenewalAnswers;
  /** `fleet`: the group as the caller has it, to leave out what the object still lists of deployments the group no longer has. */
  status(fleet?: GroupIds): GroupStatus;
  /** The group's counters, gauges and histograms since the object started (GET /metrics); `fleet` as for status. */
  metrics(fleet?: GroupIds): GroupMetrics;
  /** The last routing decisions, newest first (GET /admin/v1/groups/:group/decisions). */
  decisions(): DecisionView[];
  /** The fleet registry's push of the group's newest version: routing follows it at once. */
  install(group: ResolvedGroup): void;
  /** The registry removed the group at revision `rev`: the object takes no request, and deletes its stored state (its versions once nothing runs there). */
  retire(rev: number): void | Promise<void>;
  /**
   * The object of a shard its group gave up (retired), with nothing in flight: its counts, which no
   * longer change, for the group's own object to carry. Null while it is not retired or requests are
   * in flight, or may be: for leaseTtlMs after it restarted, until their leases renew (GroupStatus.inFlightKnown).
   */
  handOver(): GroupMetrics | null;
  /** The registry hands the group's own object the counts of the objects of shards the group gave up. */
  adopt(handed: HandedOver[]): void;
}
