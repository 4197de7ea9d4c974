import { printable } from "../src/control-characters.ts";
import { keyList, type IssuedKeyView, type KeyList, type KeyView, type UsageFiguresView, type UsageView } from "../src/tenants/admin-api.ts";
import { instantOf } from "../src/tenants/instant.ts";
import { KEY_RECORD_MAX_AGE_MS, KEY_STATUSES } from "../src/tenants/key-record.ts";
import type { AdminClient } from "./admin-client.ts";
import { CliError } from "./cli-error.ts";
import { commandTable, show, type Command, type Flag, type Flags, type Io } from "./command-io.ts";
import { table } from "./table.ts";

/** `npx kvgate keys …` and `npx kvgate usage`: virtual keys and their usage, over the admin API. */

const enc = encodeURIComponent;
const keyPath = (id: string) => `/admin/v1/keys/${enc(id)}`;
/** What shows whether a change to a key was made (cli/admin-client.ts names it when no answer came): a rotation gives it a new prefix. */
const readKey = (id: string) => `npx kvgate keys show ${id}`;

/** The positional arguments each command takes (the others take none). */
export const KEY_ARGUMENTS: Record<string, readonly string[]> = {
  "keys show": ["ID"],
  "keys revoke": ["ID"],
  "keys rotate": ["ID"],
  "keys update": ["ID"],
};

type IntFlag = "rpm" | "tpm" | "max-parallel" | "budget-tokens";
const INT_FIELDS: Record<IntFlag, string> = { rpm: "rpm", tpm: "tpm", "max-parallel": "max_parallel", "budget-tokens": "budget_tokens" };
const PERIODS = ["day", "month", "total"];
const DURATION = /^(\d+)([smhdw])$/;
const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 } as const;

/** A duration (30d, 12h, 90m) in ms, or null when `text` is not one. */
function durationMs(text: string): number | null {
  const m = DURATION.exec(text);
  return m ? Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS] : null;
}

/** An instant flag: an ISO timestamp, a day, or a duration counted from now (`sign` 1: ahead, -1: ago). */
function instantFlag(flag: string, text: string, sign: 1 | -1): string {
  const d = durationMs(text);
  if (d !== null) {
    const at = isoOf(Date.now() + sign * d);
    if (at === null) throw new CliError(`--${flag} must be a duration that ends within the years 0000 to 9999, not "${text}"`, 2);
    return at;
  }
  if (instantOf(text) === null) throw new CliError(`--${flag} must be an ISO timestamp (2027-01-31T00:00:00Z), a day (2027-01-31) or a duration (30d, 12h), not "${text}"`, 2);
  return text;
}

/**
 * `ms` as an ISO timestamp the admin API takes, or null when there is none: past the dates
 * JavaScript has, or in a year of more than four digits (+010000-…), which the API refuses.
 */
function isoOf(ms: number): string | null {
  const date = new Date(ms);
  if (Number.isNaN(date.getTime())) return null;
  const iso = date.toISOString();
  return instantOf(iso) === null ? null : iso;
}

/** A limit flag: a positive number; in an update, "none" clears the limit. */
function limit(flag: string, text: string, integer: boolean, clearable: boolean): number | null {
  if (clearable && text === "none") return null;
  const n = Number(text);
  if (text.trim() === "" || !Number.isFinite(n) || n <= 0 || (integer && !Number.isInteger(n))) {
    throw new CliError(`--${flag} must be a positive ${integer ? "integer" : "number"}${clearable ? ' (or "none" to clear it)' : ""}, not "${text}"`, 2);
  }
  return n;
}

const list = (text: string) => text.split(",").map((s) => s.trim()).filter((s) => s !== "");

/** The word an update lifts each restriction with: what `keys show` prints for none. */
const UNRESTRICTED = { models: "all", origins: "any" } as const;

/**
 * --models or --origins: a list of one or more, or, on an update, the word that lifts the
 * restriction. The API reads an empty list as no restriction, so `--models "$MODELS"` with the
 * variable empty made a key for every model (on create), or widened one to every model (on update).
 */
function restriction(flag: "models" | "origins", text: string, update: boolean): string[] {
  if (update && text.trim() === UNRESTRICTED[flag]) return [];
  const items = list(text);
  if (items.length === 0) {
    const lift = update ? `--${flag} ${UNRESTRICTED[flag]} lifts the restriction` : "leave the flag out for a key with no such restriction";
    throw new CliError(`--${flag} names no ${flag === "models" ? "model" : "origin"}: ${lift}`, 2);
  }
  return items;
}

/** The admin API body the flags say (only the fields they name); an update may clear limits with "none". */
function keyBody(flags: Flags, update: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  // In an update "none" clears the name, as it clears a limit.
  if (flags.name !== undefined) body.name = update && flags.name === "none" ? null : flags.name;
  if (flags.models !== undefined) body.models = restriction("models", flags.models, update);
  for (const flag of Object.keys(INT_FIELDS) as IntFlag[]) {
    const v = flags[flag];
    if (v !== undefined) body[INT_FIELDS[flag]] = limit(flag, v, true, update);
  }
  if (flags["budget-usd"] !== undefined) body.budget_usd = limit("budget-usd", flags["budget-usd"], false, update);
  if (flags.period !== undefined) {
    if (!PERIODS.includes(flags.period)) throw new CliError(`--period must be one of ${PERIODS.join(", ")}, not "${flags.period}"`, 2);
    body.budget_period = flags.period;
  }
  if (flags.origins !== undefined) body.origins = restriction("origins", flags.origins, update);
  if (flags.expires !== undefined) body.expires_at = update && flags.expires === "never" ? null : instantFlag("expires", flags.expires, 1);
  if (flags["no-usage"] && flags.usage) throw new CliError("--usage and --no-usage say opposite things: give one", 2);
  // --usage turns tracking back on after --no-usage (a key tracks its usage unless told not to).
  if (flags["no-usage"]) body.track_usage = false;
  else if (flags.usage) body.track_usage = true;
  return body;
}

/** --team and --user, as the key's metadata labels. */
function labels(flags: Flags): Record<string, string> | null {
  if (flags.team === undefined && flags.user === undefined) return null;
  return { ...(flags.team === undefined ? {} : { team: flags.team }), ...(flags.user === undefined ? {} : { user: flags.user }) };
}

const usd = (n: number) => `$${n}`;

function limitsLine(k: KeyView): string {
  const parts: string[] = [];
  if (k.rpm !== null) parts.push(`rpm ${k.rpm}`);
  if (k.tpm !== null) parts.push(`tpm ${k.tpm}`);
  if (k.max_parallel !== null) parts.push(`parallel ${k.max_parallel}`);
  const budget = [k.budget_tokens === null ? null : `${k.budget_tokens} tokens`, k.budget_usd === null ? null : usd(k.budget_usd)].filter((b) => b !== null);
  if (budget.length > 0) parts.push(`budget ${budget.join(" or ")} a ${k.budget_period === "total" ? "lifetime" : k.budget_period}`);
  return parts.length === 0 ? "none" : parts.join(", ");
}

const spentLine = (k: KeyView) => `${k.spent.tokens} tokens, ${usd(k.spent.cost_usd)} (${k.spent.period})`;

/** A key's fields, one a line; its name, labels and models are any text, so their control characters are written out, as a table's are. */
function keyBlock(k: KeyView): string {
  const meta = Object.entries(k.metadata).map(([n, v]) => `${n}=${v}`);
  return [
    `id        ${k.id}`,
    `prefix    ${k.prefix}`,
    `name      ${k.name ?? "-"}`,
    `status    ${k.status}${k.revoked_at ? ` (revoked ${k.revoked_at})` : ""}`,
    `models    ${k.models.length === 0 ? "all" : k.models.join(",")}`,
    `limits    ${limitsLine(k)}`,
    `origins   ${k.origins.length === 0 ? "any (no browser restriction)" : k.origins.join(",")}`,
    `expires   ${k.expires_at ?? "never"}`,
    `usage     ${k.track_usage ? "tracked" : "not tracked unless a limit needs it"}`,
    `metadata  ${meta.length === 0 ? "-" : meta.join(" ")}`,
    `created   ${k.created_at}`,
    `spent     ${spentLine(k)}`,
  ]
    .map(printable)
    .join("\n");
}

/** The one time a key is shown: it says so. */
function issuedBlock(what: string, k: IssuedKeyView): string {
  return [`${what} ${k.id}; its key, shown this once (only its hash is kept, it will not be shown again):`, "", `  ${k.key}`, "", keyBlock(k)].join("\n");
}

/** Each isolate acts on a key as it last read it, so a revocation or rotation is not at once everywhere. */
const WITHIN = `within ${KEY_RECORD_MAX_AGE_MS / 1000} s`;

function needKey(flags: Flags): string {
  if (flags.key === undefined || flags.key === "") throw new CliError("--key is required: the id of the key whose usage to show (npx kvgate keys list)", 2);
  return flags.key;
}

function usageLine(u: UsageFiguresView): string[] {
  return [String(u.prompt_tokens), String(u.cached_tokens), String(u.completion_tokens), String(u.requests), usd(u.cost_usd)];
}

function usageText(u: UsageView): string {
  const head = `usage of ${u.key}${u.model ? ` on ${u.model}` : ""}, ${u.since} to ${u.until} (UTC days): ${u.prompt_tokens} prompt tokens (${u.cached_tokens} cached), ${u.completion_tokens} completion tokens, ${u.requests} requests, ${usd(u.cost_usd)}`;
  if (u.by.length === 0) return head;
  return [head, table(["DAY", "MODEL", "BACKEND", "PROMPT", "CACHED", "COMPLETION", "REQUESTS", "COST"], u.by.map((r) => [r.day, r.model, r.backend, ...usageLine(r)]))].join("\n");
}

/** Every key (of the status, when one is given), oldest first, read a page at a time (the API answers at most its largest page, and that unless told fewer). */
async function everyKey(api: AdminClient, status: string | undefined): Promise<KeyList> {
  const keys: KeyView[] = [];
  for (let after = ""; ; ) {
    const q = new URLSearchParams();
    if (status !== undefined) q.set("status", status);
    if (after) q.set("after", after);
    const page = await api.call<KeyList>("GET", `/admin/v1/keys${q.size > 0 ? `?${q}` : ""}`);
    keys.push(...page.data);
    if (!page.has_more || page.last_id === null) return keyList(keys, false);
    after = page.last_id;
  }
}

/**
 * The usage the query names with every row, read a page at a time (the API answers a bounded page a
 * call). Every later page asks for the first page's days: a default `since` or `until` is the
 * gateway's today, which moves at UTC midnight, so a listing read over it skipped the rest of its
 * oldest day and added rows of a day its totals did not count.
 */
async function everyUsageRow(api: AdminClient, q: URLSearchParams): Promise<UsageView> {
  const first = await api.call<UsageView>("GET", `/admin/v1/usage?${q}`);
  q.set("since", first.since);
  q.set("until", first.until);
  const by = [...first.by];
  for (let page = first; page.has_more && page.next_after; ) {
    q.set("after", page.next_after);
    page = await api.call<UsageView>("GET", `/admin/v1/usage?${q}`);
    by.push(...page.by);
  }
  return { ...first, by, has_more: false, next_after: null };
}

async function update(api: AdminClient, flags: Flags, io: Io, [id]: readonly string[]): Promise<void> {
  const body = keyBody(flags, true);
  const meta = labels(flags);
  // The API replaces metadata whole: --team keeps the key's other labels.
  if (meta) body.metadata = { ...(await api.call<KeyView>("GET", keyPath(id as string))).metadata, ...meta };
  if (Object.keys(body).length === 0) throw new CliError("keys update needs at least one flag to change", 2);
  const k = await api.call<KeyView>("PATCH", keyPath(id as string), body, readKey(id as string));
  show(io, flags, k, () => `updated ${k.id}\n${keyBlock(k)}`);
}

export const KEY_COMMANDS = commandTable({
  "keys create": async (api, flags, io) => {
    const body = keyBody(flags, false);
    const meta = labels(flags);
    if (meta) body.metadata = meta;
    const k = await api.call<IssuedKeyView>("POST", "/admin/v1/keys", body, "npx kvgate keys list");
    show(io, flags, k, () => issuedBlock("created key", k));
  },
  "keys list": async (api, flags, io) => {
    if (flags.status !== undefined && !(KEY_STATUSES as readonly string[]).includes(flags.status)) throw new CliError(`--status must be one of ${KEY_STATUSES.join(", ")}, not "${flags.status}"`, 2);
    const l = await everyKey(api, flags.status);
    show(io, flags, l, () =>
      l.data.length === 0
        ? `no ${flags.status === undefined ? "" : `${flags.status} `}keys`
        : table(["ID", "PREFIX", "NAME", "STATUS", "MODELS", "LIMITS", "SPENT"], l.data.map((k) => [k.id, k.prefix, k.name ?? "-", k.status, k.models.length === 0 ? "all" : k.models.join(","), limitsLine(k), spentLine(k)])),
    );
  },
  "keys show": async (api, flags, io, [id]) => {
    const k = await api.call<KeyView>("GET", keyPath(id as string));
    show(io, flags, k, () => keyBlock(k));
  },
  "keys revoke": async (api, flags, io, [id]) => {
    const k = await api.call<KeyView>("POST", `${keyPath(id as string)}/revoke`, undefined, readKey(id as string));
    show(io, flags, k, () => `revoked ${k.id} (${k.prefix}) at ${k.revoked_at}: the gateway refuses it with 401 ${WITHIN}`);
  },
  "keys rotate": async (api, flags, io, [id]) => {
    const k = await api.call<IssuedKeyView>("POST", `${keyPath(id as string)}/rotate`, undefined, readKey(id as string));
    show(io, flags, k, () => issuedBlock(`rotated key (the old key stops working ${WITHIN})`, k));
  },
  "keys update": update,
  usage: async (api, flags, io) => {
    const q = new URLSearchParams({ key: needKey(flags) });
    if (flags.since !== undefined) q.set("since", instantFlag("since", flags.since, -1));
    if (flags.until !== undefined) q.set("until", instantFlag("until", flags.until, -1));
    if (flags.model !== undefined) q.set("model", flags.model);
    const u = await everyUsageRow(api, q);
    show(io, flags, u, () => usageText(u));
  },
});

/** What keyBody and labels read: the flags of create, and of update. */
const KEY_SETTINGS = ["models", "rpm", "tpm", "max-parallel", "budget-tokens", "budget-usd", "period", "origins", "expires", "name", "team", "user", "no-usage", "usage"] as const;

/** The flags each key command takes (cli/main.ts refuses any other): `keys create --model M` made a key for every model. */
export const KEY_FLAGS: Record<keyof typeof KEY_COMMANDS, readonly Flag[]> = {
  "keys create": KEY_SETTINGS,
  "keys list": ["status"],
  "keys show": [],
  "keys revoke": [],
  "keys rotate": [],
  "keys update": KEY_SETTINGS,
  usage: ["key", "since", "until", "model"],
};

export const KEY_USAGE = `  keys create [--models M1,M2] [--rpm N] [--tpm N] [--max-parallel N] [--budget-tokens N] [--budget-usd N]
              [--period day|month|total] [--origins O1,O2] [--expires T] [--name NAME] [--team T] [--user U] [--no-usage]
                                    a new virtual key, shown once (T: an ISO timestamp, a day, or a duration: 30d, 12h)
  keys list [--status active|revoked|expired]
  keys show ID
  keys update ID [the create flags] [--usage]
                                    changes what the flags name; "none" clears a limit or the name, --expires never clears
                                    the expiry, --models all and --origins any lift those restrictions, --usage tracks
                                    usage again after --no-usage
  keys revoke ID
  keys rotate ID                    a new key for the same id (same limits, usage goes on); the old key stops working
  usage --key ID [--since T] [--until T] [--model M]
                                    tokens and requests per UTC day, model and backend (T: a day, a timestamp or 7d, 24h ago)`;
