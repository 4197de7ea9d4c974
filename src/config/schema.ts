import * as z from "zod/mini";
import { STRATEGY_NAMES, type StrategyName } from "../routing/strategies/index.ts";
import { CONTROL_CHARACTERS_REFUSED, NO_CONTROL_CHARACTERS } from "../control-characters.ts";
import { DOT_SEGMENT_REFUSED, isDotSegment } from "../dot-segment.ts";
import { EXACT_ORIGIN, isExactOrigin } from "../origin.ts";
import { refuseProtoKey } from "../proto-key.ts";
import { FLUSH_RETRY_FIRST_MS, MIN_LEASE_TTL_MS, RENEWALS_PER_TTL } from "../routing/lease-book.ts";

/**
 * The gateway config: model groups, each a set of deployments (GPU workers) behind one routing
 * strategy. Types come from these schemas; there is no second declaration to drift.
 */

const positiveInt = () => z.number().check(z.int(), z.minimum(1));
/** A group's lease TTL: src/routing/lease-book.ts says why it has a floor. */
const leaseTtl = () =>
  z.number().check(
    z.int(),
    z.superRefine((ms, ctx) => {
      if (ms >= MIN_LEASE_TTL_MS) return;
      const message = `must be >= ${MIN_LEASE_TTL_MS}: leases are renewed every leaseTtlMs / ${RENEWALS_PER_TTL}, which must be at least the ${FLUSH_RETRY_FIRST_MS} ms a renewal that failed waits to be sent again, or a running request loses its slot`;
      ctx.issues.push({ code: "custom", message, input: ms });
    }),
  );
const nonNegativeInt = () => z.number().check(z.int(), z.minimum(0));
/**
 * A price, in dollars per million tokens. Bounded so a key's spend stays a finite sum: at 1e308 a
 * request of two tokens cost Infinity, and once acknowledged, its routing object held Infinity less
 * Infinity, NaN, against which the key's budget compared false. $1 a token is past any model's.
 */
const usdPerMillion = () => z.number().check(z.minimum(0), z.maximum(1_000_000));
/** The longest name a group, an alias or a deployment may have. */
export const NAME_MAX = 256;
/** The most routing objects (shards) a group may have. */
export const MAX_SHARDS = 64;

/** A client's name as the gateway repeats it (an error, a log line): one longer than any name can be is cut, marked "…". */
export function clipName(s: string): string {
  return s.length <= NAME_MAX ? s : `${s.slice(0, NAME_MAX)}…`;
}

/** A group's name or alias, a deployment's id, a model name: wherever one enters the fleet (the config, the admin API, a heartbeat). */
export const fleetName = () => z.string().check(z.minLength(1), z.maxLength(NAME_MAX), z.regex(NO_CONTROL_CHARACTERS, CONTROL_CHARACTERS_REFUSED));
/** A group's name or a deployment's id: what the admin API's paths address (src/dot-segment.ts). */
export const addressName = () => fleetName().check(z.refine((s) => !isDotSegment(s), DOT_SEGMENT_REFUSED));
/**
 * Names something on the Worker's env, a secret or a binding (`what`); the key itself never
 * appears in the config. The message spells out the pattern: a user sees it, not the regex.
 */
const envName = (what = "a Worker secret") =>
  z.string().check(z.regex(/^[A-Za-z_][A-Za-z0-9_]*$/, `must name ${what}: letters, digits and _, not starting with a digit`));

/** A routing strategy's name: its registry (src/routing/strategies/index.ts) says which there are. */
export type Strategy = StrategyName;

/** Log line levels, least severe first: a level writes itself and those after it. */
export const LOG_LEVELS = ["debug", "info", "warn", "error"] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

export const HOOK_NAMES = ["restamp"] as const;
export type HookName = (typeof HOOK_NAMES)[number];

/**
 * Where a group's Durable Object may be asked to live: Cloudflare's location hints, apac-ne and
 * apac-se narrower parts of apac. Objects hinted to sam, afr or me spawn in a nearby region that has
 * them (sam's in enam), as Cloudflare's Data location page says.
 */
export const LOCATION_HINTS = ["wnam", "enam", "sam", "weur", "eeur", "apac", "apac-ne", "apac-se", "oc", "afr", "me"] as const;
export type LocationHint = (typeof LOCATION_HINTS)[number];

/** Headers the gateway sets on an upstream request or realtime handshake itself: a deployment's extra headers cannot replace them. */
const GATEWAY_HEADERS = new Set(["accept", "authorization", "connection", "content-length", "content-type", "host", "sec-websocket-protocol", "transfer-encoding", "upgrade", "x-kvgate-routed-at", "x-request-id"]);

/** Why a header may not be one a deployment adds, or null: an HTTP token (RFC 9110), none of the gateway's own. */
function headerRefusal(header: string): string | null {
  if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(header)) return "must be a header name (letters, digits and -)";
  if (GATEWAY_HEADERS.has(header.toLowerCase())) return "is a header the gateway sets itself (an upstream API key goes in apiKeyEnv)";
  return null;
}

/**
 * Header name → the secret holding its value. An object with a catch-all rather than z.record,
 * which would add a few KiB of zod to the Worker bundle; the names are checked here instead.
 */
const extraHeaders = () =>
  z.pipe(
    z.unknown().check(z.superRefine(refuseProtoKey("header"))),
    z.catchall(z.object({}), envName()).check(
      z.superRefine((headers, ctx) => {
        for (const header of Object.keys(headers)) {
          const why = headerRefusal(header);
          if (why) ctx.issues.push({ code: "custom", message: why, input: header, path: [header] });
        }
      }),
    ),
  );

/**
 * Why a deployment's base URL cannot be one, or null: every rule on it, read from the URL as
 * parsed, which is how fetch will read it. The text misleads: `https:///user:pw@gpu` carries
 * credentials and `https:///gpu/v1` ends in /v1, the parser skipping the third slash.
 */
function baseUrlRefusal(text: string): string | null {
  const url = URL.parse(text);
  if (!url) return null; // z.url says so.
  // The text, not the URL parsed: the parser drops a tab or line feed and fetch would send ESC
  // percent-encoded, but the text is what is stored and shown.
  if (!NO_CONTROL_CHARACTERS.test(text)) return CONTROL_CHARACTERS_REFUSED;
  // Credentials in a URL travel in every error message that names it, the admin API and the dashboard: keys go in apiKeyEnv.
  if (url.username !== "" || url.password !== "") return "must not carry credentials (user:password@); name a secret in apiKeyEnv instead";
  // The gateway appends the API's path (/v1/chat/completions) to it, as to the server's root. The
  // href, not search and hash: an empty query ("https://gpu?") has neither, yet swallows that path.
  if (/[?#]/.test(url.href)) return "must have no query or fragment: the gateway appends the endpoint's path to it";
  if (/\/v1\/*$/i.test(url.pathname)) return "must be the server's root, without /v1: the gateway adds /v1/chat/completions (http://gpu:8000, not http://gpu:8000/v1)";
  return null;
}

export const DeploymentSchema = z.strictObject({
  /** Stable id, shown in x-kvgate-backend; defaults to the base URL's host. */
  id: z.optional(addressName()),
  // "gpu:8000" and "ws://gpu" are URLs of other schemes, so zod's "valid url" would mislead.
  // Its words for a URL it refuses only: a baseUrl missing is said as missing (src/zod-issues.ts), not as a bad URL.
  baseUrl: z.url({ protocol: /^https?$/, error: (issue) => (issue.input === undefined ? undefined : "must be an http:// or https:// URL, the server's root (http://gpu:8000)") }).check(
    z.superRefine((text, ctx) => {
      const why = baseUrlRefusal(text);
      if (why) ctx.issues.push({ code: "custom", message: why, input: text });
    }),
  ),
  /** Model name the upstream serves; the request's `model` is rewritten to it. */
  model: fleetName(),
  apiKeyEnv: z.optional(envName()),
  maxInFlight: z._default(positiveInt(), 256),
  /** Approximate KV-cache capacity in hash blocks: bounds this backend's prefix set. */
  kvCapacityBlocks: z._default(positiveInt(), 65_536),
  /**
   * Prompt tokens per second this backend prefills (~12k for a 7B model on an A100): how fast the
   * prompt work routed to it drains, which prefix-aware weighs against the cache it would reuse.
   */
  prefillTokensPerSec: z._default(positiveInt(), 10_000),
  /**
   * A Workers VPC binding (a VPC Service or Network, or any fetcher binding) the upstream requests
   * go through, `env[binding].fetch(baseUrl + path)`, to a server with no public address.
   */
  binding: z.optional(envName("a binding")),
  /** Extra headers on every upstream request, header name → the secret holding its value (Cloudflare Access service tokens). */
  headersFromEnv: z.optional(extraHeaders()),
  /**
   * Its share of the group's load relative to the others (2: twice the requests of a weight-1
   * backend at the same load); the strategies compare in-flight counts divided by it, and random
   * draws in proportion to it. round-robin does not read it: it takes every backend in turn.
   */
  weight: z._default(z.number().check(z.minimum(0.01), z.maximum(1000)), 1),
  /**
   * How the server orders the requests waiting for it. `priority`: it was started to take each
   * request's `priority` field, lower first (vLLM `--scheduling-policy priority`; SGLang
   * `--enable-priority-scheduling --schedule-low-priority-values-first`), and the gateway sets it on
   * every request, in place of a client's, so that prompts are admitted in the order their prefill
   * would end, each one's arrival plus its own uncached prefill (src/routing/engine-priority.ts;
   * embeddings, rerank and score, whose input is not hashed, at their arrival). `fcfs` (the
   * default): nothing is set; vLLM refuses a non-zero priority then.
   */
  schedulingPolicy: z._default(z.enum(["fcfs", "priority"]), "fcfs"),
});

export const FAILOVER_CAUSES = ["connect", "timeout", "5xx", "429"] as const;
export type FailoverCause = (typeof FAILOVER_CAUSES)[number];

const FAILOVER_DEFAULTS = { maxAttempts: 3, on: [...FAILOVER_CAUSES], backoffMs: 20, backoffMaxMs: 500, retryAfterCapMs: 2000 };

/** Retrying a request on the next-best backend, before any byte reached the client. */
const FailoverSchema = z.strictObject({
  /** Attempts in all, the first included; 1 turns failover off. */
  maxAttempts: z._default(z.number().check(z.int(), z.minimum(1), z.maximum(10)), FAILOVER_DEFAULTS.maxAttempts),
  /** What a retry follows: a refused connection, no headers in time, an upstream 5xx, a 429. */
  on: z._default(z.array(z.enum(FAILOVER_CAUSES)), FAILOVER_DEFAULTS.on),
  /** Backoff before attempt n: random in [0, min(backoffMaxMs, backoffMs × 2^(n−2))] (full jitter). */
  backoffMs: z._default(nonNegativeInt(), FAILOVER_DEFAULTS.backoffMs),
  backoffMaxMs: z._default(nonNegativeInt(), FAILOVER_DEFAULTS.backoffMaxMs),
  /** A 429's or 503's Retry-After is waited for, up to this; longer ones are not retried. */
  retryAfterCapMs: z._default(nonNegativeInt(), FAILOVER_DEFAULTS.retryAfterCapMs),
});

const BREAKER_DEFAULTS = {
  consecutiveFailures: 5,
  failureRate: 0.5,
  minRequests: 20,
  windowMs: 10_000,
  openMs: 5_000,
  halfOpenRequests: 2,
  closeAfterSuccesses: 2,
  probeIntervalMs: 1_000,
  probePath: "/health",
  probeTimeoutMs: 2_000,
};

/** Per backend, kept by the group's Durable Object (src/routing/breaker.ts). */
const BreakerSchema = z.strictObject({
  consecutiveFailures: z._default(positiveInt(), BREAKER_DEFAULTS.consecutiveFailures),
  failureRate: z._default(z.number().check(z.minimum(0.01), z.maximum(1)), BREAKER_DEFAULTS.failureRate),
  minRequests: z._default(positiveInt(), BREAKER_DEFAULTS.minRequests),
  windowMs: z._default(positiveInt(), BREAKER_DEFAULTS.windowMs),
  /** Open this long before trial requests go again (an earlier good health probe shortens it). */
  openMs: z._default(positiveInt(), BREAKER_DEFAULTS.openMs),
  halfOpenRequests: z._default(positiveInt(), BREAKER_DEFAULTS.halfOpenRequests),
  closeAfterSuccesses: z._default(positiveInt(), BREAKER_DEFAULTS.closeAfterSuccesses),
  /** Open and half-open backends get GET probePath about this often (jittered ±50%). */
  probeIntervalMs: z._default(positiveInt(), BREAKER_DEFAULTS.probeIntervalMs),
  probePath: z._default(z.string().check(z.regex(/^\/[^\s]*$/, "must be a path starting with /, without spaces (e.g. /health)")), BREAKER_DEFAULTS.probePath),
  probeTimeoutMs: z._default(positiveInt(), BREAKER_DEFAULTS.probeTimeoutMs),
});

/** A group's settings: everything but its deployments (the registry keeps those one by one). */
export const GroupSettingsSchema = z.strictObject({
  name: addressName(),
  /** Where the group's Durable Object is created: near its GPUs, so each route call is a short hop from them. */
  locationHint: z.optional(z.enum(LOCATION_HINTS)),
  aliases: z._default(z.array(fleetName()), []),
  strategy: z._default(z.enum(STRATEGY_NAMES), "prefix-aware"),
  /**
   * Durable Objects the group routes through, each owning a slice of its deployments: one object
   * is single-threaded (Cloudflare's soft limit is ~1,000 requests/s), so a busier group is split.
   * The Worker sends a prompt to the shard its prefix keys to (src/sharding/), with bounded loads.
   * A virtual key's limits hold per shard, as they hold per group.
   */
  shards: z._default(z.number().check(z.int(), z.minimum(1), z.maximum(MAX_SHARDS)), 1),
  /**
   * In-flight count at which prefix-aware spills a request off its best-matching backend: where a
   * server stops starting requests (vLLM's --max-num-seqs, 256 by default; llama.cpp's --parallel).
   * Below it the queued prompt work prefix-aware weighs is what delays a first token. At 32, a
   * count open-loop bursts reach, the valve copied b2b-saas's group prompts off their backends
   * until the fleet's caches thrashed (README, Routing → prefix-aware, rule 3).
   */
  saturation: z._default(positiveInt(), 256),
  /**
   * Bounded loads of a sharded group: a shard more than `balanceAbs` requests and `balanceRel`
   * times above the group's mean (per unit of weight) is passed over for the prompt's next shard.
   * Prefix-aware's choice of backend does not read them: it weighs queued prompt work instead.
   * They bound a hot prefix's shard; the wait a prompt would have is the queue-cost spill's to
   * weigh (src/sharding/shard-choice.ts). 64, SGLang's router's balance_abs_threshold: at 4, a
   * count a burst reaches on a shard of one worker, prompts left the shard holding their prefix
   * (Mooncake over 4 shards 0.953 × one object's kv_hit, b2b-saas 0.82 × its ceiling; README,
   * Which shard).
   */
  balanceAbs: z._default(nonNegativeInt(), 64),
  balanceRel: z._default(z.number().check(z.minimum(1)), 1.5),
  /**
   * A prefix matched by this many recent requests (a decaying count, half-life hotHalfLifeMs) is
   * hot: shared, like a branch point, and copied across the fleet while it carries at least a
   * backend's share of the group's new prompts. 0: only branch points are shared.
   */
  hotThreshold: z._default(z.number().check(z.minimum(0)), 2),
  hotHalfLifeMs: z._default(positiveInt(), 10_000),
  /** Characters per hash block (about 16 tokens at 4 characters per token). */
  blockChars: z._default(z.number().check(z.int(), z.minimum(8), z.maximum(4096)), 64),
  /** Longest fingerprint sent to the Durable Object; later blocks are not hashed, though the prompt's whole size (from its body's bytes) still counts as the prefill it queues. */
  maxPrefixBlocks: z._default(z.number().check(z.int(), z.minimum(1), z.maximum(16_384)), 2048),
  /**
   * A Worker renews each lease it holds every leaseTtlMs / 3; one neither renewed nor released
   * for this long (its Worker was killed mid-stream) is reclaimed. At least MIN_LEASE_TTL_MS.
   */
  leaseTtlMs: z._default(leaseTtl(), 30_000),
  /**
   * Prefix-set entries the group's Durable Object keeps over all its backends: each gets
   * min(kvCapacityBlocks, its share by kvCapacityBlocks of this). An entry costs 36–40 bytes, so
   * the default bounds the object's prefix sets near 37 MiB whatever the number of backends.
   */
  prefixBudgetBlocks: z._default(positiveInt(), 1_048_576),
  /**
   * A streamed request's time until the upstream's first token (the body's first bytes: vLLM and
   * SGLang send the headers before it, while the request still waits in the engine's queue): past
   * it the backend counts as failed and the request is retried elsewhere.
   */
  firstByteTimeoutMs: z._default(positiveInt(), 60_000),
  /**
   * A non-streamed answer comes when its generation ends, so it gets a bound of its own: past it
   * the client gets a 504, the request is not retried (it would redo the whole generation), and
   * the backend is not blamed. Once its headers came, what is left of it bounds only the waits on
   * an upstream that drips the body, not on a client that reads it slowly. A minute under the
   * official SDKs' own 600 s: they count from before the request left, and at equal limits they
   * give up first and send the generation again, never reading the 504 that says not to.
   */
  nonStreamTimeoutMs: z._default(positiveInt(), 540_000),
  /**
   * A stream that sends no byte for this long is cut with an SSE error event. Off by default: it
   * needs JavaScript to see every chunk, which the plain pass-through path otherwise avoids. Only
   * a read the upstream leaves waiting counts: not a write held back by a client that is not reading.
   * A realtime session in which no message goes either way for this long is closed too, and one
   * whose backend owes an answer (to the client's response.create or input_audio_buffer.commit) and
   * sends nothing for this long, whatever its client sends meanwhile.
   */
  streamIdleTimeoutMs: z.optional(positiveInt()),
  /**
   * On a stream the gateway reads (hooks, or streamIdleTimeoutMs set), an SSE comment after this
   * long without upstream bytes and again at this interval, so a client that left a silent stream
   * is found (a write to it fails) within about two intervals. 0 turns it off.
   */
  streamKeepAliveMs: z._default(nonNegativeInt(), 500),
  /** The whole request, retries included; a stream running past it is cut with an SSE error event. */
  totalTimeoutMs: z.optional(positiveInt()),
  failover: z._default(FailoverSchema, FAILOVER_DEFAULTS),
  breaker: z._default(BreakerSchema, BREAKER_DEFAULTS),
  /**
   * Feedback from the engines (src/routing/feedback.ts): routing learns each backend's characters
   * per token, effective KV capacity and prefill rate from the usage of answers whose usage the
   * Worker reads. A virtual key that counts tokens has every answer read anyway; `sampleRate` is
   * the share of the other requests the Worker reads it on too (the usage event asked for, and
   * taken out again when the client did not ask for it). Off (0) by default: a sampled stream
   * leaves the native pipe for a JavaScript read of every chunk, ~120–140 µs of Worker CPU a chunk
   * (several ms for a few hundred tokens), which would show in the p99 of any share worth
   * learning from, and a group with no usage read routes exactly as configured. The learners need
   * tens of reports per backend, not every request: 0.01–0.05 teaches a busy group within minutes.
   */
  feedback: z._default(z.strictObject({ sampleRate: z._default(z.number().check(z.minimum(0), z.maximum(1)), 0) }), { sampleRate: 0 }),
  /** How often the group's Durable Object saves its routing state (breakers are saved as they change). */
  snapshotIntervalMs: z._default(positiveInt(), 10_000),
  /** Groups tried in order when no backend of this one can take the request (all open or full). */
  fallbacks: z._default(z.array(fleetName()), []),
  /**
   * The Workers VPC bindings a server that registers itself into this group (a heartbeat, with the
   * register key every GPU server holds) may name: a binding reaches a private network, so a
   * heartbeat naming one the operator meant for another group, or for no GPU at all, would send
   * this group's requests into it. Absent: none; the admin API and the config name any. A fleet
   * stored before this setting gets, once, the bindings its groups' servers named (README, Upgrading
   * to the release that brings registrationBindings).
   */
  registrationBindings: z.optional(z.array(envName("a Workers VPC binding"))),
  /**
   * Whether servers may register themselves into this group (a heartbeat, with the register key
   * every GPU server holds). false: the group holds only the deployments the config and the admin
   * API add, such as one tenant's Access-protected engines; a heartbeat naming it would otherwise
   * add a server of its choosing and, weighted up, be sent most of the group's prompts.
   */
  registration: z._default(z.boolean(), true),
  hooks: z._default(z.array(z.enum(HOOK_NAMES)), []),
  /**
   * US dollars per million tokens, for virtual keys' spend and cost budgets. Cached prompt tokens
   * cost `cachedPromptUsdPerMillion` (default: the prompt price).
   */
  pricing: z.optional(
    z.strictObject({
      promptUsdPerMillion: usdPerMillion(),
      cachedPromptUsdPerMillion: z.optional(usdPerMillion()),
      completionUsdPerMillion: usdPerMillion(),
    }),
  ),
});

/** Deployments a group may hold: each is one row of its routing object's state, and the group one registry value. */
export const MAX_DEPLOYMENTS = 1024;

/**
 * A group with its deployments, as the config seeds the fleet registry and `PUT /admin/v1/fleet`
 * replaces it. A group may start with none: its servers register themselves.
 */
export const ModelGroupSchema = z.extend(GroupSettingsSchema, {
  deployments: z._default(z.array(DeploymentSchema).check(z.maxLength(MAX_DEPLOYMENTS)), []),
});

export const AUTH_DEFAULTS = { masterKeyEnv: "KVGATE_MASTER_KEY", adminKeyEnv: "KVGATE_ADMIN_KEY", registerKeyEnv: "KVGATE_REGISTER_KEY", metricsKeyEnv: "KVGATE_METRICS_KEY", registrationSecrets: [] as string[] };

const LIMIT_DEFAULTS = { maxBodyBytes: 4 * 1024 * 1024, maxMessages: 4096, maxTools: 1024, maxContentParts: 8192, maxToolCalls: 8192 };

/** A config without `logging`: every request's line, at info. Also what a Worker whose config it cannot read logs by (workers/gateway/index.ts). */
export const LOGGING_DEFAULTS = { sampleRate: 1, level: "info" as const };

export const GatewayConfigSchema = z.strictObject({
  /**
   * Every /v1 request needs the master key; nothing in a request (its Host, its origin) waives it.
   * /admin/v1 takes the admin key only, a GPU server's heartbeat the register key (or the admin
   * key), and /metrics the metrics key (or the admin key): each names a Worker secret, and no key
   * opens another's door.
   */
  auth: z._default(
    z.strictObject({
      /** Env var holding the master key (a Worker secret in deploys, npm start's keys file locally). */
      masterKeyEnv: z._default(envName(), AUTH_DEFAULTS.masterKeyEnv),
      adminKeyEnv: z._default(envName(), AUTH_DEFAULTS.adminKeyEnv),
      registerKeyEnv: z._default(envName(), AUTH_DEFAULTS.registerKeyEnv),
      /** A key a Prometheus scraper can hold without holding the admin key: it opens GET /metrics only. */
      metricsKeyEnv: z._default(envName(), AUTH_DEFAULTS.metricsKeyEnv),
      /**
       * The secrets a heartbeat may name in apiKeyEnv or headersFromEnv: the register key is on every
       * GPU server, and the gateway sends a deployment the secrets it names, so a heartbeat names
       * none unless listed here. Never one of the gateway's own keys (src/config/upstream-access.ts).
       */
      registrationSecrets: z._default(z.array(envName()), AUTH_DEFAULTS.registrationSecrets),
    }),
    AUTH_DEFAULTS,
  ),
  /** Origins whose pages may call the gateway from a browser; none unless listed ("*": any). */
  cors: z._default(
    z.strictObject({
      allowedOrigins: z._default(
        z.array(z.string().check(z.refine((o) => o === "*" || isExactOrigin(o), EXACT_ORIGIN))).check(
          z.refine((list) => !list.includes("*") || list.length === 1, { message: '"*" (any origin) must be alone: with others listed it still lets in any', path: [] }),
        ),
        [],
      ),
    }),
    { allowedOrigins: [] },
  ),
  /**
   * What one request may hold. A body over maxBodyBytes is a 413; a count over another limit is a
   * 400 naming the field, answered before the body is validated: counting an array is cheap,
   * validating and fingerprinting an oversized one is not.
   */
  limits: z._default(
    z.strictObject({
      // A body is held several times over (bytes, text, parsed, sent on) in an isolate of 128 MB.
      maxBodyBytes: z._default(positiveInt().check(z.maximum(16 * 1024 * 1024)), LIMIT_DEFAULTS.maxBodyBytes),
      maxMessages: z._default(positiveInt(), LIMIT_DEFAULTS.maxMessages),
      /** Tool definitions in `tools`. */
      maxTools: z._default(positiveInt(), LIMIT_DEFAULTS.maxTools),
      /** Content parts (text, images, ...) summed over every message's `content` array. */
      maxContentParts: z._default(positiveInt(), LIMIT_DEFAULTS.maxContentParts),
      /** Entries summed over every message's `tool_calls`. */
      maxToolCalls: z._default(positiveInt(), LIMIT_DEFAULTS.maxToolCalls),
    }),
    LIMIT_DEFAULTS,
  ),
  /**
   * The JSON line each request leaves on the console (Workers Logs, `wrangler tail`, Logpush). A
   * request is sampled once, when it comes in (sampleRate 0..1); an unsampled one does no logging
   * work. Lines under `level` are not written (a 2xx is info, a 4xx warn, a 5xx error; a stream cut
   * after its 200 as the answer it stands for: src/logging/request-log.ts).
   */
  logging: z._default(
    z.strictObject({
      requests: z._default(
        z.strictObject({
          sampleRate: z._default(z.number().check(z.minimum(0), z.maximum(1)), LOGGING_DEFAULTS.sampleRate),
          level: z._default(z.enum(LOG_LEVELS), LOGGING_DEFAULTS.level),
        }),
        LOGGING_DEFAULTS,
      ),
    }),
    { requests: LOGGING_DEFAULTS },
  ),
  /** How long an isolate holds finished leases for its next route call before flushing them. */
  releaseFlushMs: z._default(nonNegativeInt(), 10),
  /**
   * The fleet's seed: the registry (durable-objects/fleet-registry.ts) takes these groups when it
   * starts empty, and again whenever this list changes; between such deploys the admin API and
   * heartbeats change the fleet. A deploy may leave it empty and seed through the admin API.
   */
  modelGroups: z._default(z.array(ModelGroupSchema), []),
});

export type GatewayConfigInput = z.input<typeof GatewayConfigSchema>;
export type GatewayConfig = z.output<typeof GatewayConfigSchema>;
export type ModelGroupConfig = z.output<typeof ModelGroupSchema>;
export type GroupSettings = z.output<typeof GroupSettingsSchema>;
export type DeploymentConfig = z.output<typeof DeploymentSchema>;
