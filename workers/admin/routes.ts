import type { Context, Hono } from "hono";
import { GatewayError, notFound, unavailable, type ErrorType } from "../../src/openai/errors.ts";
import type { DeploymentList, DeploymentRow, FleetStatus, GroupList } from "../../src/fleet/admin-api.ts";
import { isRecord } from "../../src/fleet/merge-patch.ts";
import type { AdminCommand, AdminResult, FleetRegistryRpc, GroupRecord } from "../../src/fleet/protocol.ts";
import { unroutedReason, type RefusalStatus } from "../../src/fleet/registry.ts";
import { REGISTRY_NAME } from "../../src/fleet/registry-name.ts";
import type { BackendSnapshot, GroupStatus } from "../../src/routing/protocol.ts";
import type { DecisionView } from "../../src/metrics/decisions.ts";
import { mergeDecisions, mergeStatus } from "../../src/sharding/merge.ts";
import type { LoadedConfig } from "../config.ts";
import type { Env } from "../env.ts";
import type { AppEnv } from "../gateway/app-env.ts";
import { registryFailure, reloadFleet } from "../fleet.ts";
import { authenticateAdmin, authenticateRegistration } from "../gateway/auth.ts";
import { askEachObject, askGroup, eachGroup, fleetReadDeadline } from "../gateway/group-object.ts";
import { readJsonBody, readOptionalJsonBody } from "../gateway/body.ts";
import { BODY_SHAPE, type ShapeBounds } from "../../src/openai/body-shape.ts";
import { mountKeys } from "./keys.ts";
import { bodyFields, noBody, noQuery, queryParams } from "./params.ts";

type AdminEnv = AppEnv;

/** The admin API's changes whose body carries all they read. */
const CHANGES_WITH_A_BODY = new Set(["POST", "PUT", "PATCH"]);

const registry = (env: Env) => env.FLEET.getByName(REGISTRY_NAME);

/** The registry's records, for every read of the admin API; a 503 while it cannot be reached. */
async function records(env: Env): Promise<ReturnType<FleetRegistryRpc["records"]>> {
  try {
    return await registry(env).records();
  } catch (e) {
    throw registryFailure(e);
  }
}

/**
 * The admin API under /admin/v1: the fleet registry's groups and deployments, and the heartbeats
 * GPU servers register with. Every change goes to the registry, which checks it whole, stores it
 * and pushes it to the group's routing object before answering: a 200 with `"routing": "applied"`
 * means new requests follow it already, in every isolate — the object refuses what the change took
 * away, and tells an isolate behind it to read the fleet before it goes upstream (GroupPath.afterDecision).
 */
export function mountAdmin(app: Hono<AdminEnv>, config: LoadedConfig): void {
  const A = "/admin/v1";
  app.post(`${A}/heartbeats`, async (c) => {
    await authenticateRegistration(c.req.raw, config, c.env);
    return changed(c, { op: "heartbeat", heartbeat: await body(c) });
  });
  app.use(`${A}/*`, async (c, next) => {
    if (c.req.path !== `${A}/heartbeats`) {
      await authenticateAdmin(c.req.raw, config, c.env);
      // Every change but a DELETE (which reads its revision there) takes no query: see noQuery.
      // A heartbeat, a server's call and not an operator's, is left as it was.
      if (CHANGES_WITH_A_BODY.has(c.req.method)) noQuery(c.req.url, `a ${c.req.method} of the admin API`);
    }
    await next();
  });

  app.get(`${A}/status`, async (c) => {
    // The call's time counts from its arrival, the registry's read within it (the dashboard refreshes every 10 s).
    const until = fleetReadDeadline();
    const { rev, groups, seed } = await records(c.env);
    const live = await eachGroup(groups, (g, until) => groupStatus(c.env, g, until), until);
    const status: FleetStatus = {
      rev,
      groups: groups.map((g, i) => {
        const answered = live[i] ?? null;
        const rows = deploymentRows(g, answered);
        // The routing objects' every backend, not the rows': a deployment removed while requests run on it is no row, and its server still answers them.
        const inFlight = answered?.inFlightKnown ? answered.status.backends.reduce((n, b) => n + b.inFlight, 0) : null;
        return { name: g.settings.name, rev: g.rev, routingRev: answered?.status.rev ?? null, deployments: rows.length, takingRequests: rows.filter((r) => r.takesRequests).length, inFlight, deploymentRows: rows };
      }),
      seed,
    };
    return c.json(status);
  });

  app.get(`${A}/fleet`, async (c) => {
    const { rev, groups } = await records(c.env);
    return c.json({ rev, modelGroups: groups.map((g) => ({ ...g.settings, deployments: g.deployments.map((d) => d.spec) })) });
  });
  app.put(`${A}/fleet`, async (c) => {
    // What `fleet export` gives, its `rev` sent back.
    const given = bodyFields(await body(c, FLEET_SHAPE), ["modelGroups", "rev"], "PUT /admin/v1/fleet");
    return changed(c, { op: "replace", modelGroups: given.modelGroups, rev: given.rev });
  });

  app.get(`${A}/groups`, async (c) => {
    const { rev, groups } = await records(c.env);
    const list: GroupList = { object: "list", rev, data: groups.map((g) => ({ ...g.settings, rev: g.rev, source: g.source, deployments: g.deployments.length })) };
    return c.json(list);
  });
  app.post(`${A}/groups`, async (c) => changed(c, { op: "add-group", group: await body(c) }, 201));
  app.get(`${A}/groups/:group`, async (c) => {
    const g = await recordOf(c.env, c.req.param("group"));
    return c.json({ ...g.settings, rev: g.rev, source: g.source, deployments: deploymentRows(g, await groupStatus(c.env, g)) });
  });
  // The routing object's last decisions, newest first: what the dashboard polls.
  app.get(`${A}/groups/:group/decisions`, async (c) => {
    const g = await recordOf(c.env, c.req.param("group"));
    let answers: DecisionView[][];
    try {
      answers = await askEachObject(c.env, g.settings, (o) => o.decisions());
    } catch (e) {
      console.error(`kvgate: reading the decisions of group ${g.settings.name} failed: ${(e as Error).message}`);
      throw unavailable(`the routing object of group "${g.settings.name}" did not answer`, "routing_unavailable");
    }
    return c.json({ object: "list", group: g.settings.name, data: mergeDecisions(answers) });
  });
  app.patch(`${A}/groups/:group`, async (c) => changed(c, { op: "update-group", group: c.req.param("group"), ...(await patchOf(c)) }));
  app.delete(`${A}/groups/:group`, async (c) => changed(c, { op: "remove-group", group: c.req.param("group"), rev: await deleteRev(c) }));

  app.get(`${A}/groups/:group/deployments`, async (c) => {
    const g = await recordOf(c.env, c.req.param("group"));
    const list: DeploymentList = { object: "list", group: g.settings.name, rev: g.rev, data: deploymentRows(g, await groupStatus(c.env, g)) };
    return c.json(list);
  });
  app.post(`${A}/groups/:group/deployments`, async (c) => changed(c, { op: "add-deployment", group: c.req.param("group"), deployment: await body(c) }, 201));
  app.get(`${A}/groups/:group/deployments/:id`, async (c) => {
    const g = await recordOf(c.env, c.req.param("group"));
    const row = deploymentRows(g, await groupStatus(c.env, g)).find((r) => r.id === c.req.param("id"));
    if (!row) throw notFound(`no deployment "${c.req.param("id")}" in group "${g.settings.name}"`, "deployment_not_found");
    // Its group's revision: what a PATCH or DELETE of it carries back (a deployment has none of its own).
    return c.json({ ...row, rev: g.rev });
  });
  app.patch(`${A}/groups/:group/deployments/:id`, async (c) => changed(c, { op: "update-deployment", group: c.req.param("group"), id: c.req.param("id"), ...(await patchOf(c)) }));
  app.delete(`${A}/groups/:group/deployments/:id`, async (c) => changed(c, { op: "remove-deployment", group: c.req.param("group"), id: c.req.param("id"), rev: await deleteRev(c) }));
  const STATE_OF = { drain: "draining", enable: "active", disable: "disabled" } as const;
  for (const [verb, state] of Object.entries(STATE_OF)) {
    app.post(`${A}/groups/:group/deployments/:id/${verb}`, async (c) => {
      await bodyless(c, "a drain, enable or disable", "it is made whatever the group is at, and takes no revision");
      return changed(c, { op: "set-state", group: c.req.param("group"), id: c.req.param("id"), state });
    });
  }

  mountKeys(app, config);
  app.all(`${A}/*`, (c) => {
    throw notFound(`no admin route for ${c.req.method} ${c.req.path}`, "unknown_url");
  });
}

/** The most bytes an admin body may hold: a whole fleet's, for PUT /admin/v1/fleet. */
const BODY_BYTES = 4 * 1024 * 1024;

/**
 * The shape a whole fleet's body may have. An export fills in every setting's default, some 20
 * bytes a node (48 nodes a group, 9 a deployment): a thousand groups of ten deployments pass the
 * client API's 131,072 nodes at 3 MB, and `fleet export` then `fleet apply` would be refused. A
 * node a 8 bytes leaves the bytes the bound on any export; a body of bare brackets is still
 * counted and refused before it is parsed. Only the admin key's holder sends one.
 */
const FLEET_SHAPE: ShapeBounds = { ...BODY_SHAPE, maxNodes: BODY_BYTES / 8 };

async function body(c: Context<AdminEnv>, bounds: ShapeBounds = BODY_SHAPE): Promise<unknown> {
  return readJsonBody(c.req.raw, BODY_BYTES, bounds);
}

/**
 * A PATCH's body: the fields to change, and the group's revision they were decided at (`rev`, as
 * the PUT of the fleet carries its own), which no group setting nor deployment field is named.
 */
async function patchOf(c: Context<AdminEnv>): Promise<{ patch: unknown; rev?: unknown }> {
  const b = await body(c);
  if (!isRecord(b) || !Object.hasOwn(b, "rev")) return { patch: b };
  const { rev, ...patch } = b;
  return { patch, rev };
}

/** Refuses a body that carries anything, for a route that reads none (noBody). */
async function bodyless(c: Context<AdminEnv>, what: string, instead: string): Promise<void> {
  noBody(await readOptionalJsonBody(c.req.raw, BODY_BYTES), what, instead);
}

/** A DELETE's revision, from its query; a body carrying one (or anything) is refused, not left unread. */
async function deleteRev(c: Context<AdminEnv>): Promise<unknown> {
  const rev = queryRev(c);
  await bodyless(c, "a DELETE", "its revision goes in its query, ?rev=N");
  return rev;
}

/**
 * A DELETE's revision, which it sends with no body to carry it: `?rev=N`, its only query parameter; a value
 * that is no whole number is left as text, for the registry's check to refuse.
 */
function queryRev(c: Context<AdminEnv>): unknown {
  const v = queryParams(c.req.url, ["rev"], "a DELETE").get("rev") ?? undefined;
  return v !== undefined && /^\d{1,15}$/.test(v) ? Number(v) : v;
}

const ERROR_TYPES = { 400: "invalid_request_error", 403: "permission_error", 404: "not_found_error", 409: "invalid_request_error" } as const satisfies Record<RefusalStatus, ErrorType>;

/**
 * Sends a command to the registry; a refusal becomes its OpenAI-style error. After a change this
 * isolate reads the fleet again before answering, so whoever made the change sees it at once from
 * here (other isolates learn it from their routing objects, or on an unknown model name). That
 * read failing is logged, not answered: the change holds, and an error would have the operator
 * send it again (a 409, or a second removal's 404).
 */
async function changed(c: Context<AdminEnv>, cmd: AdminCommand, okStatus: 200 | 201 = 200): Promise<Response> {
  let r: AdminResult;
  try {
    r = await registry(c.env).command(cmd);
  } catch (e) {
    // It may have failed before the registry took the command, or after (reset while pushing it).
    throw registryFailure(e, "the fleet registry did not answer: the change may or may not have been made; read the fleet back before sending it again");
  }
  if (!r.ok) throw new GatewayError(r.status, ERROR_TYPES[r.status], r.message, r.code, r.param);
  if (r.changed.length + r.removed.length > 0) await reloadFleet(c.env);
  return c.json(r, okStatus);
}

/**
 * The group's record, alone: what the dashboard polls every second for each group on screen, and
 * `deployments drain --wait` every 250 ms, would otherwise copy the whole fleet out of the
 * registry, whose one thread also serves every heartbeat and fleet read. A Worker of this release
 * may call an object of the release before during a deploy (the two change apart), which has no
 * `record`: that one is read whole, as before, until it restarts on this release.
 */
async function recordOf(env: Env, name: string): Promise<GroupRecord> {
  let g: GroupRecord | null | undefined;
  try {
    g = await registry(env).record(name);
  } catch (e) {
    if (!lacksRecord(e)) throw registryFailure(e);
    g = (await records(env)).groups.find((x) => x.settings.name === name);
  }
  if (!g) throw notFound(`no group "${name}" in the fleet`, "group_not_found");
  return g;
}

/** What the runtime throws when the object called has no such RPC method: a registry of the release before `record`. */
function lacksRecord(e: unknown): boolean {
  return e instanceof TypeError && /does not implement/.test(e.message);
}

/**
 * The routing objects' view of the group (its shards' together, and those of shards it gave up);
 * null when one of its shards' cannot be reached (the registry's records still answer).
 * `inFlightKnown`: every object answered, those of shards it gave up too, which may hold requests,
 * and none restarted too lately to know what runs on it (GroupStatus.inFlightKnown).
 */
async function groupStatus(env: Env, g: GroupRecord, until?: number): Promise<{ status: GroupStatus; inFlightKnown: boolean } | null> {
  const a = await askGroup(env, g.settings, g.objects, (o) => o.status(), until);
  if (!a.complete) return null;
  const status = mergeStatus(a.answers);
  return { status, inFlightKnown: a.unanswered.length === 0 && status.inFlightKnown !== false };
}

/**
 * The registry's deployments with what the routing objects say of them (`live`; null when one of
 * its shards' did not answer). `drained` tells an operator it is safe to stop a server, so it is
 * said only when every object answered (an object of a shard the group gave up that did not may
 * hold its requests, and one that restarted lately may not know of them yet: `inFlight` is then
 * null) and none of them admits it any longer (mergeStatus keeps the entry that does): one the
 * objects never saw has nothing in flight.
 */
function deploymentRows(g: GroupRecord, answered: { status: GroupStatus; inFlightKnown: boolean } | null): DeploymentRow[] {
  const live = answered?.inFlightKnown ? answered.status : null;
  // mergeStatus lists a deployment once, its two addresses' requests together.
  const seen = new Map<string, BackendSnapshot>((answered?.status.backends ?? []).map((b) => [b.id, b]));
  const now = Date.now();
  return g.deployments.map((d) => {
    const b = seen.get(d.spec.id);
    const inFlight = b && live ? b.inFlight : null;
    // A deployment the group routes nothing is no backend of its objects, which may never have seen it.
    const unrouted = unroutedReason(d, g.settings);
    const takesRequests = d.state === "active" && unrouted === null && (b?.takesRequests ?? true);
    return {
      id: d.spec.id,
      url: d.spec.baseUrl,
      model: d.spec.model,
      state: d.state,
      source: d.source,
      weight: d.spec.weight,
      maxInFlight: d.spec.maxInFlight,
      expiresAt: d.expiresAt === null ? null : new Date(d.expiresAt).toISOString(),
      removeAt: d.removeAt === null ? null : new Date(d.removeAt).toISOString(),
      inFlight,
      takesRequests,
      unrouted,
      // Not while an object still admits it: a drain it has not been told of yet (the registry's
      // push pending) leaves it routing there, to any isolate holding the fleet before the drain.
      drained: (d.state !== "active" || unrouted !== null) && live !== null && (inFlight ?? 0) === 0 && b?.takesRequests !== true,
      breaker: b ? b.breaker.state : null,
      restingUntil: b?.restingUntil != null && b.restingUntil > now ? new Date(b.restingUntil).toISOString() : null,
      prefixBlocks: b ? b.prefixBlocks : null,
      prefixCapacity: b ? b.prefixCapacity : null,
      ttftEwmaMs: b ? b.ttftEwmaMs : null,
      promptTokens: b ? b.usage.prompt : null,
      cachedTokens: b ? b.usage.cached : null,
    };
  });
}
