import { readFile } from "node:fs/promises";
import { isDotSegment } from "../src/dot-segment.ts";
import type { DeploymentList, DeploymentRow, FleetStatus, GroupList } from "../src/fleet/admin-api.ts";
import type { AdminResult } from "../src/fleet/protocol.ts";
import type { AdminClient } from "./admin-client.ts";
import { CliError } from "./cli-error.ts";
import { commandTable, show, type Command, type Flag, type Flags, type Io } from "./command-io.ts";
import { table } from "./table.ts";

type Applied = Extract<AdminResult, { ok: true }>;

const enc = encodeURIComponent;

function need(flags: Flags, name: "group" | "id" | "url" | "model" | "file"): string {
  const v = flags[name];
  if (v === undefined || v === "") throw new CliError(`--${name} is required`, 2);
  return v;
}

function number(flags: Flags, name: "max-in-flight" | "weight" | "timeout", integer: boolean): number | undefined {
  const v = flags[name];
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === "" || !Number.isFinite(n) || (integer && !Number.isInteger(n))) throw new CliError(`--${name} must be ${integer ? "an integer" : "a number"}, not "${v}"`, 2);
  return n;
}

/** A flag as one segment of an admin path; "." or ".." would be taken out of the path by fetch, and the call would land elsewhere (a deployment's DELETE on its group). */
function segment(flags: Flags, name: "group" | "id"): string {
  const v = need(flags, name);
  if (isDotSegment(v)) throw new CliError(`--${name} cannot be "${v}": no group or deployment has that name, and in a URL path it would address another route`, 2);
  return enc(v);
}

const groupPath = (f: Flags) => `/admin/v1/groups/${segment(f, "group")}`;
const deploymentPath = (f: Flags) => `${groupPath(f)}/deployments/${segment(f, "id")}`;
/** What shows whether a change to a group's deployments was made (cli/admin-client.ts names it when no answer came). */
const readDeployments = (f: Flags) => `npx kvgate deployments list --group ${f.group}`;

/** What a change did, in a line: its revision (the group's, the fleet's for an apply: answeredRev), and whether routing follows it already. */
function said(what: string, r: Applied, of: "group" | "fleet" = "group"): string {
  const routing =
    r.routing === "applied"
      ? "routing follows it now"
      : "routing pending: the group's routing object was not reached; Workers bring the change along with their next request";
  return `${what} (${of} revision ${r.rev}; ${routing})`;
}

function deploymentTable(rows: readonly DeploymentRow[]): string {
  if (rows.length === 0) return "no deployments";
  return table(
    ["ID", "STATE", "IN-FLIGHT", "TAKES", "WEIGHT", "MAX", "BREAKER", "SOURCE", "URL", "MODEL"],
    rows.map((r) => [
      r.id,
      r.state === "draining" && r.drained ? "drained" : r.state,
      r.inFlight === null ? "-" : String(r.inFlight),
      r.takesRequests ? "yes" : r.unrouted ? `no (${r.unrouted})` : "no",
      String(r.weight),
      String(r.maxInFlight),
      r.breaker ?? "-",
      r.source + (r.expiresAt ? ` (ttl to ${r.expiresAt})` : ""),
      r.url,
      r.model,
    ]),
  );
}

/** What the last deploy's modelGroups did not do, a line each (none when they were taken whole). */
function seedLines(seed: FleetStatus["seed"]): string[] {
  if (seed?.state === "refused") return [`warning: the last deploy's modelGroups were refused, the fleet kept as it was: ${seed.message}`];
  return (seed?.aliasesHeld ?? []).map((h) => `warning: the last deploy's group ${h.group} went without alias ${h.alias}, which group ${h.holder} holds`);
}

async function drain(api: AdminClient, flags: Flags, io: Io): Promise<void> {
  // Read before the drain is sent: a wrong flag must leave the fleet as it was. A --timeout with no
  // --wait would be ignored, and a script would stop the server with requests still in flight.
  const timeoutS = number(flags, "timeout", false) ?? 600;
  if (flags.timeout !== undefined && !flags.wait) throw new CliError("--timeout is the bound of --wait: add --wait, or leave --timeout out", 2);
  if (!(timeoutS > 0)) throw new CliError(`--timeout must be a number of seconds above 0, not "${flags.timeout}"`, 2);
  const r = await api.call<Applied>("POST", `${deploymentPath(flags)}/drain`, undefined, readDeployments(flags));
  if (!flags.wait) return show(io, flags, r, () => said(`draining ${flags.id}: it takes no new requests, those in flight finish`, r));
  if (!flags.json) io.out(said(`draining ${flags.id}: it takes no new requests, those in flight finish`, r));
  const until = Date.now() + timeoutS * 1000;
  let last: number | null = -1;
  for (;;) {
    let row: DeploymentRow;
    try {
      row = await api.call<DeploymentRow>("GET", deploymentPath(flags));
    } catch (e) {
      // The drain is under way: a gateway that cannot answer for a moment (a deploy restarting its
      // registry) is waited through, as a routing object that cannot say is; anything else ends it.
      if (!(e instanceof CliError) || !e.passing || Date.now() > until) throw e;
      io.note(`${flags.id}: ${e.message}; reading it again`);
      await io.sleep(1000);
      continue;
    }
    if (row.drained) return show(io, flags, row, () => `${row.id} is drained: nothing in flight, safe to stop`);
    if (row.inFlight !== last) io.note(`${row.id}: ${row.inFlight ?? "?"} in flight`);
    last = row.inFlight;
    if (Date.now() > until) throw new CliError(`${row.id} still has ${row.inFlight ?? "?"} in flight after ${timeoutS} s`);
    await io.sleep(250);
  }
}

function stateChange(verb: "enable" | "disable", what: string): Command {
  return async (api, flags, io) => {
    const r = await api.call<Applied>("POST", `${deploymentPath(flags)}/${verb}`, undefined, readDeployments(flags));
    show(io, flags, r, () => said(`${flags.id} ${what}`, r));
  };
}

/** The fleet: deployments, groups, status (over the registry's admin API). */
export const FLEET_COMMANDS = commandTable({
  "deployments list": async (api, flags, io) => {
    const list = await api.call<DeploymentList>("GET", `${groupPath(flags)}/deployments`);
    show(io, flags, list, () => deploymentTable(list.data));
  },
  "deployments add": async (api, flags, io) => {
    const deployment = {
      id: need(flags, "id"),
      baseUrl: need(flags, "url"),
      model: need(flags, "model"),
      maxInFlight: number(flags, "max-in-flight", true),
      weight: number(flags, "weight", false),
      apiKeyEnv: flags["api-key-env"],
    };
    const r = await api.call<Applied>("POST", `${groupPath(flags)}/deployments`, deployment, readDeployments(flags));
    show(io, flags, r, () => said(`added ${deployment.id} to group ${flags.group}`, r));
  },
  "deployments update": async (api, flags, io) => {
    const patch = {
      baseUrl: flags.url,
      model: flags.model,
      maxInFlight: number(flags, "max-in-flight", true),
      weight: number(flags, "weight", false),
      apiKeyEnv: flags["api-key-env"],
    };
    if (Object.values(patch).every((v) => v === undefined)) throw new CliError("deployments update needs at least one flag to change", 2);
    const r = await api.call<Applied>("PATCH", deploymentPath(flags), patch, readDeployments(flags));
    show(io, flags, r, () => said(`updated ${flags.id} of group ${flags.group}`, r));
  },
  "deployments drain": drain,
  "deployments enable": stateChange("enable", "takes requests again"),
  "deployments disable": stateChange("disable", "is disabled: it takes no new requests, those in flight finish"),
  "deployments remove": async (api, flags, io) => {
    const r = await api.call<Applied>("DELETE", deploymentPath(flags), undefined, readDeployments(flags));
    show(io, flags, r, () => said(`removed ${flags.id} from group ${flags.group}`, r));
  },
  "groups list": async (api, flags, io) => {
    const list = await api.call<GroupList>("GET", "/admin/v1/groups");
    show(io, flags, list, () =>
      list.data.length === 0 ? "no groups" : table(["NAME", "STRATEGY", "DEPLOYMENTS", "REV", "SOURCE", "ALIASES"], list.data.map((g) => [g.name, g.strategy, String(g.deployments), String(g.rev), g.source, g.aliases.join(",")])),
    );
  },
  status: async (api, flags, io) => {
    const s = await api.call<FleetStatus>("GET", "/admin/v1/status");
    show(io, flags, s, () =>
      [
        `${api.url}: fleet revision ${s.rev}, ${s.groups.length} group(s)`,
        ...seedLines(s.seed),
        table(
          ["GROUP", "DEPLOYMENTS", "TAKING", "IN-FLIGHT", "REV", "ROUTING"],
          s.groups.map((g) => [g.name, String(g.deployments), String(g.takingRequests), g.inFlight === null ? "-" : String(g.inFlight), String(g.rev), g.routingRev === null ? "unreachable" : g.routingRev >= g.rev ? "current" : `at ${g.routingRev}`]),
        ),
      ].join("\n"),
    );
  },
  "fleet export": async (api, _flags, io) => {
    // Always JSON: it is the input of `fleet apply`.
    io.out(JSON.stringify(await api.call("GET", "/admin/v1/fleet"), null, 2));
  },
  "fleet apply": async (api, flags, io) => {
    const file = need(flags, "file");
    let body: unknown;
    try {
      body = JSON.parse(await readFile(file, "utf8"));
    } catch (e) {
      throw new CliError(`cannot read ${file} as JSON: ${(e as Error).message.split("\n")[0]}`, 2);
    }
    const r = await api.call<Applied>("PUT", "/admin/v1/fleet", body, "npx kvgate fleet export");
    show(io, flags, r, () => said(`applied ${file}: ${r.changed.length} group(s) changed, ${r.removed.length} removed`, r, "fleet"));
  },
});

const DEPLOYMENT_FIELDS = ["group", "id", "url", "model", "max-in-flight", "weight", "api-key-env"] as const;
const ONE_DEPLOYMENT = ["group", "id"] as const;

/** The flags each fleet command takes (cli/main.ts refuses any other): one it does not read would be silently ignored. */
export const FLEET_FLAGS: Record<keyof typeof FLEET_COMMANDS, readonly Flag[]> = {
  "deployments list": ["group"],
  "deployments add": DEPLOYMENT_FIELDS,
  "deployments update": DEPLOYMENT_FIELDS,
  "deployments drain": [...ONE_DEPLOYMENT, "wait", "timeout"],
  "deployments enable": ONE_DEPLOYMENT,
  "deployments disable": ONE_DEPLOYMENT,
  "deployments remove": ONE_DEPLOYMENT,
  "groups list": [],
  status: [],
  "fleet export": [],
  "fleet apply": ["file"],
};

export const FLEET_USAGE = `  deployments list    --group G
  deployments add     --group G --id ID --url URL --model M [--max-in-flight N] [--weight W] [--api-key-env NAME]
  deployments update  --group G --id ID [--url URL] [--model M] [--max-in-flight N] [--weight W] [--api-key-env NAME]
  deployments drain   --group G --id ID [--wait [--timeout S]]
  deployments enable  --group G --id ID
  deployments disable --group G --id ID
  deployments remove  --group G --id ID
  groups list
  status
  fleet export                      the fleet as JSON (the input of fleet apply)
  fleet apply --file F              replace the whole fleet with F's {"modelGroups": [...]}`;
