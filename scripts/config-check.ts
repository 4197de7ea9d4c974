/**
 * Reading and checking a gateway config from the command line, with the parser the Worker uses.
 * Whatever goes wrong is told in lines a user can act on, never as a stack.
 */
import { readFileSync } from "node:fs";
import { resolve } from "node:path";
import { parseConfig, type ResolvedConfig } from "../src/config/load.ts";
import { parseJsonc } from "../src/config/jsonc.ts";

export interface ConfigSource {
  /** How to name it in messages: the file's path, or $KVGATE_CONFIG. */
  name: string;
  raw: string;
}

/** Told to the user in one line, after which the command exits non-zero. */
export class UsageError extends Error {}

/** `from`: the folder a relative path is read from. */
export function readConfigFile(path: string, from = "."): ConfigSource {
  try {
    return { name: path, raw: readFileSync(resolve(from, path), "utf8") };
  } catch (e) {
    throw new UsageError(`${path}: ${unreadable(e)}`);
  }
}

function unreadable(e: unknown): string {
  const code = e instanceof Error && "code" in e ? e.code : undefined;
  if (code === "ENOENT") return "no such file";
  if (code === "EISDIR") return "is a directory, not a config file";
  if (code === "EACCES") return "permission denied";
  return e instanceof Error ? e.message : String(e);
}

/**
 * The config the user named: a path given on the command line, else the file KVGATE_CONFIG_FILE
 * names, else the text of KVGATE_CONFIG; null when there is none. A relative path is the user's:
 * npm runs a script at the package's root, and says in INIT_CWD where the command was typed.
 */
export function namedConfig(path: string | undefined, env: NodeJS.ProcessEnv): ConfigSource | null {
  const from = env.INIT_CWD || ".";
  if (path) return readConfigFile(path, from);
  if (env.KVGATE_CONFIG_FILE && env.KVGATE_CONFIG) throw new UsageError("KVGATE_CONFIG_FILE and KVGATE_CONFIG are both set: unset one, so that it is clear which config is meant");
  if (env.KVGATE_CONFIG_FILE) return readConfigFile(env.KVGATE_CONFIG_FILE, from);
  if (env.KVGATE_CONFIG) return { name: "$KVGATE_CONFIG", raw: env.KVGATE_CONFIG };
  return null;
}

export type Checked = { ok: true; config: ResolvedConfig; source: ConfigSource } | { ok: false; problems: string[]; source: ConfigSource };

/**
 * Every problem the parser can tell at once, one a line: every field's; the checks across fields
 * (src/config/load.ts) run only once the fields pass, as they read the parsed config.
 */
export function checkConfig(source: ConfigSource): Checked {
  const result = parseConfig(source.raw);
  if (result.ok) return { ok: true, config: result.config, source };
  return { ok: false, problems: result.errors ?? [result.error.replace(/^config: /, "")], source };
}

/** The lines that say what is wrong with `name`. */
export function problemLines(name: string, problems: readonly string[]): string[] {
  if (problems.length === 1) return [`${name}: ${problems[0]}`];
  return [`${name}: ${problems.length} problems`, ...problems.map((p) => `  ${p}`)];
}

/** The config as the Worker will hold it: plain JSON, without the comments and spaces of the file. */
export function minified(source: ConfigSource): string {
  const parsed = parseJsonc(source.raw);
  if (!parsed.ok) throw new Error(`${source.name} was checked, yet does not parse: ${parsed.error}`);
  return JSON.stringify(parsed.value);
}

/**
 * What each of the gateway's optional keys turns on: unset, that door stays shut and nothing else
 * fails (workers/gateway/auth.ts). The master key is never optional: every /v1 request needs it.
 */
const OPTIONAL_KEYS = {
  adminKeyEnv: "the admin API, npx kvgate and GET /metrics",
  registerKeyEnv: "heartbeats of GPU servers that register themselves, with a key that opens nothing else",
  metricsKeyEnv: "GET /metrics for a scraper that should not hold the admin key",
} as const;

export interface EnvNames {
  /**
   * The secrets the config cannot do without: the master key, the upstreams' and Access headers'
   * secrets, and the key (with the secrets it reads) without which its fleet can get no server.
   */
  secrets: string[];
  /** The gateway's keys that only turn something on, each with what, and the secrets only they read. */
  optional: { name: string; turnsOn: string }[];
  bindings: string[];
}

/** What the Worker will read from its env: secrets by name, and bindings; each must be set where it runs. */
export function envNames(config: ResolvedConfig): EnvNames {
  const { registrationSecrets, masterKeyEnv, ...keys } = config.auth;
  const upstreams = new Set<string>();
  const bindings = new Set<string>();
  for (const g of config.groups) {
    for (const d of g.deployments) {
      if (d.apiKeyEnv) upstreams.add(d.apiKeyEnv);
      for (const name of Object.values(d.headersFromEnv ?? {})) upstreams.add(name);
      if (d.binding) bindings.add(d.binding);
    }
  }
  // A key is needed when, without it, some of the config's fleet can get no server.
  const empty = config.groups.filter((g) => g.deployments.length === 0);
  const needed: Record<keyof typeof OPTIONAL_KEYS, boolean> = {
    // No group (modelGroups left out, or []): a heartbeat joins a group, never makes one, so only
    // the admin API can give the fleet a server; nor can it give one to a group that refuses every
    // heartbeat (registration false).
    adminKeyEnv: config.groups.length === 0 || empty.some((g) => !g.registration),
    // Any other group with no deployments gets its servers from their heartbeats, with the register key.
    registerKeyEnv: empty.some((g) => g.registration),
    metricsKeyEnv: false,
  };
  const secrets = new Set<string>([masterKeyEnv]);
  const optional: EnvNames["optional"] = [];
  for (const [field, name] of Object.entries(keys) as [keyof typeof OPTIONAL_KEYS, string][]) {
    // The secrets a heartbeat may name are read only for the servers heartbeats register: they go
    // with the register key, needed or optional as it is (an upstream's secret is needed anyway).
    const readWith = field === "registerKeyEnv" ? registrationSecrets.filter((secret) => !upstreams.has(secret)) : [];
    if (needed[field]) {
      for (const secret of [name, ...readWith]) secrets.add(secret);
      continue;
    }
    optional.push({ name, turnsOn: OPTIONAL_KEYS[field] });
    for (const secret of readWith) optional.push({ name: secret, turnsOn: `for servers that register themselves and name it (auth.registrationSecrets), with ${name}` });
  }
  for (const name of upstreams) secrets.add(name);
  return { secrets: [...secrets], optional, bindings: [...bindings] };
}

/** The lines that name the secrets: `lead` before the needed ones, then the optional ones, one a line. */
export function secretLines(names: EnvNames, lead: string): string[] {
  if (names.optional.length === 0) return [`  ${lead}: ${names.secrets.join(", ")}`];
  return [
    `  ${lead}: ${names.secrets.join(", ")}`,
    "  optional secrets, each turning on what it names (unset, it stays off):",
    ...names.optional.map((o) => `    ${o.name}: ${o.turnsOn}`),
  ];
}

/**
 * A secret's name that looks like a secret's value: 32 letters and digits or more, a digit among
 * them, no underscore (an Access client secret is 64 hex characters, and one starting with a
 * letter is a name as far as the config's rules can tell). Names are written LIKE_THIS.
 */
const LOOKS_LIKE_A_VALUE = /^(?=[A-Za-z0-9]*\d)[A-Za-z0-9]{32,}$/;

/** The lines that warn of each secret's name that looks like a value pasted where its name goes. */
export function pastedValueLines(names: EnvNames): string[] {
  return [...names.secrets, ...names.optional.map((o) => o.name)]
    .filter((name) => LOOKS_LIKE_A_VALUE.test(name))
    .map((name) => `  warning: ${name.slice(0, 8)}… looks like a secret's value, not a secret's name: put the value in a secret (npx wrangler secret put ACCESS_CLIENT_SECRET --env production) and write its name in the config`);
}

/**
 * The line that names the groups without `pricing`, where a virtual key whose only budget is in
 * dollars is refused (src/tenants/route-tenant.ts countsSpendIn); null when every group has one.
 */
export function unpricedLine(config: ResolvedConfig): string | null {
  const unpriced = config.groups.filter((g) => g.pricing === undefined).map((g) => g.name);
  if (unpriced.length === 0) return null;
  return `  without pricing (a virtual key whose only budget is budget_usd is refused there, and passes over them as fallbacks): ${unpriced.join(", ")}`;
}

/** The line that says a config is good, and what it holds. */
export function okLine(checked: Extract<Checked, { ok: true }>): string {
  const groups = checked.config.groups.map((g) => `${g.name} (${g.strategy}, ${g.deployments.length} deployment(s))`);
  // A config may leave the fleet out, when it is too big for the secret that carries the config (README, Deploy).
  const held = groups.length > 0 ? groups.join(", ") : "no model groups (the admin API seeds the fleet: npx kvgate fleet apply --file fleet.json)";
  return `${checked.source.name}: ok — ${held}`;
}
