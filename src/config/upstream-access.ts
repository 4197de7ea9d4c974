import type { ResolvedDeployment } from "./load.ts";
import { asFetchSends, HEADER_BREAK } from "../header-value.ts";
import type { GatewayConfig } from "./schema.ts";

/**
 * How the gateway reaches a deployment: the public internet (the runtime's own fetch), or a
 * binding — a Workers VPC Service or Network, a Cloudflare Tunnel into the GPUs' private network —
 * with its bearer token (apiKeyEnv) and extra headers whose values are secrets (Cloudflare Access
 * service tokens). Read from the isolate's env once per deployment, never per request. A problem
 * names the binding or the secret, never a secret's value.
 */

/** What a binding offers the gateway: its fetch. Structural, since src/ knows no Workers types. */
export interface UpstreamFetcher {
  fetch(input: string, init?: RequestInit): Promise<Response>;
}

export type UpstreamReach =
  | {
      ok: true;
      /** The binding requests go through; null: the runtime's own fetch. */
      via: UpstreamFetcher | null;
      /** Headers every request to the deployment carries; null when it has none. */
      headers: Readonly<Record<string, string>> | null;
      /**
       * The Authorization every call to the deployment carries — a request, a realtime handshake,
       * a health probe (vLLM's --api-key guards every /v1 route, so a probePath there wants it
       * too): its apiKeyEnv secret as a bearer token; null when it names none, or the secret is
       * unset or empty.
       */
      authorization: string | null;
      /** The secrets among what it is sent (its key, its secret headers' values): taken out of what its errors say (src/upstream/error-body.ts). */
      secrets: readonly string[];
    }
  | { ok: false; problems: ReachProblem[] };

/** `field` is relative to the deployment: `binding`, `headersFromEnv.<header>`. */
export interface ReachProblem {
  field: string;
  message: string;
}

type ReachNeeds = Partial<Pick<ResolvedDeployment, "binding" | "headersFromEnv" | "apiKeyEnv">>;

/** A deployment on the public internet with no key and no extra headers: the runtime's fetch, as it is. */
export const PUBLIC_REACH: UpstreamReach = { ok: true, via: null, headers: null, authorization: null, secrets: [] };

/** Three property reads: a deployment that uses none of these costs the request path nothing more. */
export function needsReach(d: ReachNeeds): boolean {
  return d.binding !== undefined || d.headersFromEnv !== undefined || d.apiKeyEnv !== undefined;
}

const resolved = new WeakMap<ReachNeeds, UpstreamReach>();

/**
 * The deployment's reach in this isolate, resolved on first use and kept for as long as the
 * deployment object lives (one config, or one registry version of its group). `env` and `keys`
 * (the config's, gatewayKeys) are the isolate's, the same for every call.
 */
export function reachOf(d: ReachNeeds, env: Readonly<Record<string, unknown>>, keys: GatewayKeys): UpstreamReach {
  if (!needsReach(d)) return PUBLIC_REACH;
  let reach = resolved.get(d);
  if (!reach) resolved.set(d, (reach = resolveReach(d, env, keys)));
  return reach;
}

export function resolveReach(d: ReachNeeds, env: Readonly<Record<string, unknown>>, keys: GatewayKeys): UpstreamReach {
  // Whatever brought the deployment (the config, the registry, a version stored before either
  // refused it), what is sent to it is built here, and never holds one of the gateway's keys.
  const own = gatewayKeyProblems(d, keys);
  if (own.length > 0) return { ok: false, problems: own };
  const problems: ReachProblem[] = [];
  let via: UpstreamFetcher | null = null;
  if (d.binding !== undefined) {
    const bound = env[d.binding];
    if (isFetcher(bound)) via = bound;
    // One message whether or not the name holds something else (a secret, a variable): a heartbeat,
    // sent with the register key every GPU server has, learns nothing of which names exist.
    else problems.push({ field: "binding", message: `"${d.binding}" is not a Workers VPC binding of this Worker (declare it in wrangler.toml: vpc_services or vpc_networks)` });
  }
  let headers: Record<string, string> | null = null;
  for (const [header, name] of Object.entries(d.headersFromEnv ?? {})) {
    const raw = env[name];
    const value = typeof raw === "string" ? asFetchSends(raw) : raw;
    if (typeof value === "string" && value !== "" && !HEADER_BREAK.test(value)) {
      (headers ??= {})[header] = value;
      continue;
    }
    const fix = ` (npx wrangler secret put ${name} --env production)`;
    const why = value === undefined ? `is not set${fix}` : typeof value !== "string" ? "is a binding, not a secret" : value === "" ? `is empty${fix}` : LINE_BREAK_REFUSED;
    problems.push({ field: `headersFromEnv.${header}`, message: `names ${name}, which ${why}` });
  }
  const key = d.apiKeyEnv === undefined ? undefined : env[d.apiKeyEnv];
  // An unset or empty key is none (a server without --api-key); one fetch could not send would
  // fail every call before it left, charged to the server as unreachable: refused, as a header's.
  const bearer = typeof key === "string" ? asFetchSends(key) || null : null;
  if (bearer !== null && HEADER_BREAK.test(bearer)) problems.push({ field: "apiKeyEnv", message: `names ${d.apiKeyEnv}, which ${LINE_BREAK_REFUSED}` });
  if (problems.length > 0) return { ok: false, problems };
  // What is sent, trimmed as fetch would send it anyway, is what an upstream's error may echo.
  const secrets = [...(bearer !== null ? [bearer] : []), ...Object.values(headers ?? {})];
  return { ok: true, via, headers, authorization: bearer !== null ? `Bearer ${bearer}` : null, secrets };
}

const LINE_BREAK_REFUSED = "holds a line break, which no header value may";

function isFetcher(v: unknown): v is UpstreamFetcher {
  return typeof v === "object" && v !== null && typeof Reflect.get(v, "fetch") === "function";
}

/** What a deployment names that the gateway sends it: its bearer (apiKeyEnv) and its extra headers' values. */
interface SecretNeeds {
  apiKeyEnv?: string | undefined;
  headersFromEnv?: Readonly<Record<string, string>> | undefined;
}

/** The gateway's own keys: each secret's name, with the `auth` field that names it. */
export type GatewayKeys = ReadonlyMap<string, string>;

/** Every name `auth` gives a key by (masterKeyEnv, adminKeyEnv, ...): each opens one of the gateway's doors. */
export function gatewayKeys(auth: GatewayConfig["auth"]): GatewayKeys {
  return new Map(Object.entries(auth).flatMap(([field, name]) => (typeof name === "string" ? [[name, `auth.${field}`] as const] : [])));
}

/**
 * Two of the gateway's keys in one secret: each key opens its own door (a client's, the admin
 * API's, heartbeats', /metrics), and one secret for two would open both to whoever holds it.
 */
export function sharedKeySecrets(auth: GatewayConfig["auth"]): string[] {
  const first = new Map<string, string>();
  const out: string[] = [];
  for (const [field, name] of Object.entries(auth)) {
    if (typeof name !== "string") continue;
    const before = first.get(name);
    if (before === undefined) first.set(name, field);
    else out.push(`auth.${field} names ${name}, which auth.${before} names too: each of the gateway's keys needs its own secret`);
  }
  return out;
}

function secretsNamed(d: SecretNeeds): { field: string; name: string }[] {
  const named = d.apiKeyEnv === undefined ? [] : [{ field: "apiKeyEnv", name: d.apiKeyEnv }];
  for (const [header, name] of Object.entries(d.headersFromEnv ?? {})) named.push({ field: `headersFromEnv.${header}`, name });
  return named;
}

/** The secrets `d` names that are the gateway's own keys, with the fields that name them. */
export function gatewayKeysNamed(d: SecretNeeds, keys: GatewayKeys): { field: string; name: string }[] {
  return secretsNamed(d).filter(({ name }) => keys.has(name));
}

/** Why a secret's name may not be one the gateway sends upstream, or null: it is one of the gateway's own keys. */
export function gatewayKeyRefusal(name: string, keys: GatewayKeys): string | null {
  const field = keys.get(name);
  return field === undefined ? null : `names ${name}, the gateway's own key (${field}): a deployment is sent the secrets it names, and no upstream may hold the gateway's keys`;
}

/**
 * A deployment that names one of the gateway's keys would be sent it with every request, to an
 * address whoever added the deployment chose: refused from every source (config, admin API,
 * heartbeat).
 */
export function gatewayKeyProblems(d: SecretNeeds, keys: GatewayKeys): ReachProblem[] {
  return gatewayKeysNamed(d, keys).map(({ field, name }) => ({ field, message: gatewayKeyRefusal(name, keys) as string }));
}

/** The secrets `d` names that `listed` (auth.registrationSecrets) does not, with the fields that name them. */
export function unlistedSecretsNamed(d: SecretNeeds, listed: readonly string[]): { field: string; name: string }[] {
  return secretsNamed(d).filter(({ name }) => !listed.includes(name));
}

/**
 * A heartbeat comes with the register key, which every GPU server holds: it may name only the
 * secrets the operator listed for self-registered servers (auth.registrationSecrets).
 */
export function unlistedSecretProblems(d: SecretNeeds, listed: readonly string[]): ReachProblem[] {
  return unlistedSecretsNamed(d, listed).map(({ field, name }) => ({ field, message: `names ${name}, which a heartbeat may not name: list it in the config's auth.registrationSecrets for self-registered servers to use, or add the deployment through the admin API` }));
}

/** One deployment's problems (none: it can be reached as it says); resolving them also fills the cache reachOf reads. */
export function reachProblemsOf(d: ReachNeeds, env: Readonly<Record<string, unknown>>, keys: GatewayKeys): readonly ReachProblem[] {
  const reach = reachOf(d, env, keys);
  return reach.ok ? [] : reach.problems;
}

/** Every deployment's problems, each with its config path (`modelGroups[0].deployments[1]`). */
export function reachProblems(groups: readonly { deployments: readonly ReachNeeds[] }[], env: Readonly<Record<string, unknown>>, keys: GatewayKeys): { at: string; problem: ReachProblem }[] {
  return groups.flatMap((g, gi) => g.deployments.flatMap((d, di) => reachProblemsOf(d, env, keys).map((problem) => ({ at: `modelGroups[${gi}].deployments[${di}]`, problem }))));
}
