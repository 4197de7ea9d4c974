import { DurableObject } from "cloudflare:workers";
import { parseConfig, type ConfigResult } from "../src/config/load.ts";
import { AUTH_DEFAULTS } from "../src/config/schema.ts";
import { gatewayKeys, reachProblemsOf } from "../src/config/upstream-access.ts";
import { answeredRev, applyCommand, groupNamed } from "../src/fleet/apply.ts";
import type { AdminCommand, AdminResult, FleetRegistryRpc, FleetSnapshot, SeedReport } from "../src/fleet/protocol.ts";
import { FleetRegistry as Fleet, RegistryError, type Change, type GroupRecord, type Seeded } from "../src/fleet/registry.ts";
import type { ResolvedGroup } from "../src/config/load.ts";
import type { ModelGroupRpc } from "../src/routing/protocol.ts";
import type { GroupMetrics } from "../src/metrics/group-metrics.ts";
import { FleetRows } from "./fleet-rows.ts";
import { groupObject } from "./group-stub.ts";
import { groupShards, objectNamesOf, shardOfObject } from "../src/sharding/partition.ts";
import { logEvent } from "../src/logging/event-log.ts";

/** What the registry needs of its environment: the config (for its seed) and the groups' routing objects. */
export interface RegistryEnv {
  KVGATE_CONFIG?: unknown;
  MODEL_GROUP: DurableObjectNamespace<ModelGroupRpc & Rpc.DurableObjectBranded>;
  /** The bindings and secrets deployments name (Workers VPC bindings, Access headers' values). */
  [name: string]: unknown;
}

/**
 * The fleet registry: one object for the gateway, holding every model group and deployment in
 * its SQLite storage (a row per group and one per deployment: a write is what changed, FleetRows),
 * seeded from the config.
 * It is off the request path: Workers read a snapshot once per isolate and again when a routing
 * object tells them their version is behind. A change is pushed to the group's routing object
 * before the command is answered, so it holds for new requests from then on.
 */
export class FleetRegistry extends DurableObject<RegistryEnv> implements FleetRegistryRpc {
  private readonly fleet: Fleet;
  private readonly sql: SqlStorage;
  private readonly rows: FleetRows;
  private seedReport: SeedReport | null;
  /**
   * Routing objects owed a push, each with the fleet's revision that owes it: stored with the change
   * (persist), so a restart before the push gets through tries it again; a push sent at that
   * revision or later takes it off. And how long until the next try.
   */
  private readonly unpushed: Map<string, number>;
  private retryMs: number = PUSH_RETRY_MS.min;
  /** When the pushes in `unpushed` are next tried (epoch ms), or null when none is. */
  private retryAt: number | null = null;
  /**
   * Routing objects of changes whose write failed, kept in memory (persist): pushed with the write
   * that stores them, not before, so no object holds a revision a restart would take back. And
   * when the alarm is to write them again if no change does first (epoch ms), or null.
   */
  private readonly unstored = new Set<string>();
  private writeAgainAt: number | null = null;
  /** When the objects of shards groups gave up are next asked to hand their counts over (handOver), or null when no group has one. */
  private handOverAt: number | null = null;

  constructor(ctx: DurableObjectState, env: RegistryEnv) {
    super(ctx, env);
    const parsed = parseConfig(env.KVGATE_CONFIG);
    const auth = parsed.ok ? parsed.config.auth : AUTH_DEFAULTS;
    // A binding or secret a deployment names must exist before it takes traffic, as for the config's
    // own; the config's auth says which secrets are the gateway's keys, and which a heartbeat may name.
    const keys = gatewayKeys(auth);
    this.fleet = new Fleet({ reachable: (d) => reachProblemsOf(d, env, keys), auth });
    this.sql = ctx.storage.sql;
    this.sql.exec("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)");
    const meta = new Map(this.sql.exec<{ k: string; v: string }>("SELECT k, v FROM meta").toArray().map((r) => [r.k, r.v]));
    const report = meta.get("seedReport");
    this.seedReport = report === undefined ? null : (JSON.parse(report) as SeedReport);
    // Any push from now on sends at least the fleet stored: each takes one of these off.
    this.unpushed = new Map((JSON.parse(meta.get("unpushed") ?? "[]") as string[]).map((o) => [o, 0]));
    if (this.unpushed.size > 0) this.retryAt = Date.now() + PUSH_RETRY_MS.min;
    const stored = { rev: Number(meta.get("rev") ?? 0), seedHash: meta.get("seed") ?? null };
    this.rows = new FleetRows(ctx.storage, stored);
    const groups = this.rows.load();
    // Written once the registry has loaded a fleet as one that keeps registrationBindings: until then the fleet stored is an older registry's.
    const beforeBindingRule = meta.get(BINDING_RULE) === undefined;
    const { change, disarmed, bindingsKept } = this.fleet.load(stored.rev, stored.seedHash, groups, Date.now(), { beforeBindingRule });
    if (change.changed.length > 0) {
      // Disabling, draining or listing bindings in use changes no group's shards.
      const owed = this.persist({ change, before: this.shardCounts() });
      for (const { code, ...d } of disarmed) logEvent(code, "warn", d);
      for (const kept of bindingsKept) logEvent("registration_bindings_kept", "warn", { ...kept });
      logRegistry("load", this.fleet.rev, change);
      // The calls are built before the seed below can change the groups again.
      void this.pushTo(owed);
    }
    // After the groups it changed are stored: a start cut between the two does the upgrade again, which finds them listing their bindings.
    if (beforeBindingRule) this.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES (?, '1')", BINDING_RULE);
    this.seedFromConfig(parsed);
    // After the seed, which may have changed a group's list: the servers this start leaves out, as they now are.
    for (const { reason, ...u } of this.fleet.unrouted()) logEvent(reason, "warn", u);
    // Pushes a restart found untried: their alarm, which the seed may not have set.
    if (this.retryAt !== null) this.wake();
  }

  snapshot(): FleetSnapshot {
    const objects: Record<string, number> = {};
    for (const n of this.fleet.names()) {
      const had = this.fleet.group(n)?.objects;
      if (had !== undefined) objects[n] = had;
    }
    return { rev: this.fleet.rev, groups: this.fleet.snapshot(), objects, seed: this.fleet.seedHash };
  }

  records(): { rev: number; groups: GroupRecord[]; seed: SeedReport | null } {
    return { rev: this.fleet.rev, groups: this.fleet.names().map((n) => this.fleet.group(n) as GroupRecord), seed: this.seedReport };
  }

  record(name: string): GroupRecord | null {
    return this.fleet.group(name) ?? null;
  }

  async command(cmd: AdminCommand): Promise<AdminResult> {
    let change: Change;
    const before = this.shardCounts();
    try {
      change = applyCommand(this.fleet, cmd, Date.now());
    } catch (e) {
      if (!(e instanceof RegistryError)) throw e;
      return { ok: false, status: e.status, code: e.code, message: e.message, param: e.param };
    }
    // With any change held back by a failed write, which this one stored: a drain sent again finds it made (NONE), and pushes it here.
    const owed = this.persist({ change, before });
    // This change's: a command made while the push waits moves the fleet on, and a script carrying that revision into its next PATCH would pass the 409 meant for it.
    const rev = answeredRev(this.fleet, cmd);
    logRegistry(cmd.op, this.fleet.rev, change);
    // A drain sent again after "pending" changes nothing, so owes nothing: its group's objects, still
    // waiting for the retry, are pushed now, and answer for it. Not a heartbeat's: each server sends
    // one every few seconds, and pushing with each would undo the retry's backoff.
    const waiting = this.waitingIn(groupNamed(cmd), owed);
    const heartbeat = cmd.op === "heartbeat";
    const routing = await this.pushTo(heartbeat ? owed : [...owed, ...waiting]);
    return { ok: true, rev, ...change, routing: heartbeat && waiting.length > 0 ? "pending" : routing };
  }

  /** The routing objects of `group` (null: of every group) still owed an earlier push, but those in `owed`. */
  private waitingIn(group: string | null, owed: readonly string[]): string[] {
    return [...this.unpushed.keys()].filter((o) => !owed.includes(o) && (group === null || shardOfObject(o).group === group));
  }

  override async alarm(): Promise<void> {
    const before = this.shardCounts();
    // Not checked against the fleet's rules (FleetRegistry.expire): a lapsed server stops taking requests whatever else the fleet holds.
    const change = this.fleet.expire(Date.now());
    const owed = this.persist({ change, before });
    logRegistry("expire", this.fleet.rev, change);
    await this.pushTo(owed);
    // What an earlier push did not get to its object, as the fleet now is, once its time has come.
    if (this.retryAt !== null && Date.now() >= this.retryAt) {
      this.retryAt = null;
      await this.pushTo([...this.unpushed.keys()], true);
    }
    if (this.handOverAt !== null && Date.now() >= this.handOverAt) {
      this.handOverAt = null;
      await this.handOver();
      this.wake();
    }
  }

  /**
   * Asks the objects of shards each group gave up for their counts, and, once every one of a group's
   * has nothing in flight, hands them to the group's own object, which carries them in /metrics
   * (GroupMetrics.handedOver): those objects are then listed no more, so no scrape, status read or
   * admin row asks them (nor fails on them) again. Until then the alarm asks again.
   */
  private async handOver(): Promise<void> {
    for (const { group, own, retired, shards, objects } of this.fleet.givenUp()) {
      const hint = this.fleet.resolved(group)?.locationHint;
      try {
        const counts = await Promise.all(retired.map((o) => groupObject(this.env, o, hint).handOver()));
        if (counts.some((m) => m === null)) continue;
        await groupObject(this.env, own, hint).adopt(retired.map((object, i) => ({ object, metrics: counts[i] as GroupMetrics })));
        if (this.fleet.handedOver(group, shards, objects)) await this.pushTo(this.persist());
      } catch (e) {
        console.error(`kvgate: handing the counts of the objects of shards group ${group} gave up to its own object failed: ${String(e)}`);
      }
    }
  }

  /**
   * The config's groups, when they are not the seed taken last (a deploy changed them). What the
   * fleet made of them is told where an operator looks, warn events and GET /admin/v1/status: a
   * refused seed leaves every group routing to the servers the last deploy named.
   */
  private seedFromConfig(parsed: ConfigResult): void {
    if (!parsed.ok) return; // The Worker answers every request with the config's error.
    // A config without modelGroups leaves the fleet to the admin API and `fleet apply`.
    if (parsed.config.seed === null) return;
    const taken = this.fleet.seedHash;
    const before = this.shardCounts();
    let seeded: Seeded | null;
    try {
      seeded = this.fleet.seed(parsed.config.seed);
    } catch (e) {
      if (!(e instanceof RegistryError)) throw e;
      logEvent("seed_refused", "warn", { message: e.message, param: e.param, rev: this.fleet.rev });
      this.report({ state: "refused", message: e.message, param: e.param });
      return;
    }
    if (seeded === null) {
      // The seed taken already, under the hash of a registry of before: its new hash, stored.
      if (this.fleet.seedHash !== taken) this.persist();
      return;
    }
    for (const removal of seeded.removals) logEvent("seed_removed", "warn", { ...removal });
    for (const held of seeded.aliasesHeld) logEvent("seed_alias_held", "warn", { ...held });
    for (const kept of seeded.bindingsKept) logEvent("registration_bindings_kept", "warn", { ...kept });
    const owed = this.persist({ change: seeded, before });
    // What a deploy changed in the fleet is told as a command's change is: an audit that follows registry events sees it.
    logRegistry("seed", this.fleet.rev, seeded);
    this.report({ state: "taken", rev: this.fleet.rev, aliasesHeld: seeded.aliasesHeld });
    // As for a command: Workers bring a changed group along on its next request, but nothing else
    // retires a group the config dropped or a shard it gave up, nor updates a group nobody calls.
    void this.pushTo(owed);
  }

  private report(seed: SeedReport): void {
    this.seedReport = seed;
    this.sql.exec("INSERT OR REPLACE INTO meta (k, v) VALUES ('seedReport', ?)", JSON.stringify(seed));
  }

  /**
   * Writes what changed in one transaction, and sets the alarm for the next heartbeat expiry. A
   * write that fails is handed back to the fleet, to be written with the next (or by the alarm, a
   * second on): the change stays made in memory, and a later write of its group alone would store
   * only its own rows. `made`'s routing objects (the change this write is for) are then held back
   * until a write stores it: a retry of the command finds it made and changes nothing, so nothing
   * else would push it. Returns the routing objects to push: `made`'s, and those held back that
   * this write stored. They are owed (`unpushed`) in the write's own transaction: a restart while
   * their push waits on an object finds the change made and nothing else to push it.
   */
  private persist(made?: { change: Change; before: ReadonlyMap<string, number> }): string[] {
    const w = this.fleet.takeWrites();
    const owed = [...new Set([...(made ? this.objectsOf(made.change, made.before) : []), ...this.unstored])];
    const owing = owed.filter((o) => !this.unpushed.has(o));
    const stillOwed = owing.length === 0 ? undefined : () => this.storeUnpushed([...this.unpushed.keys(), ...owing]);
    try {
      this.rows.write(w, this.fleet.names(), Date.now(), (n) => this.fleet.group(n), stillOwed);
    } catch (e) {
      this.fleet.requeue(w);
      if (made) for (const o of this.objectsOf(made.change, made.before)) this.unstored.add(o);
      this.writeAgainAt = Date.now() + PUSH_RETRY_MS.min;
      this.wake();
      throw e;
    }
    this.writeAgainAt = null;
    this.unstored.clear();
    for (const o of owed) this.unpushed.set(o, this.fleet.rev);
    // Tried again by the alarm should the push hang (no answer ever comes to take them off), not
    // while a slow one is still under way: a failure arms the retry at once (pushTo).
    if (owed.length > 0) this.retryAt ??= Date.now() + PUSH_HANG_MS;
    this.wake();
    return owed;
  }

  private storeUnpushed(objects: readonly string[]): void {
    this.sql.exec("INSERT INTO meta (k, v) VALUES ('unpushed', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v", JSON.stringify(objects));
  }

  /** Each group's number of routing objects, before a change: a group that loses shards retires their objects. */
  private shardCounts(): Map<string, number> {
    return new Map(this.fleet.names().map((n) => [n, objectNamesOf(n, this.fleet.group(n)?.settings.shards).length]));
  }

  /** The routing objects `change` concerns: each changed group's, those of the shards it gave up, and every object of a group removed. */
  private objectsOf(change: Change, before: ReadonlyMap<string, number>): string[] {
    const retired = (n: string, from: number) => objectNamesOf(n, before.get(n)).slice(from);
    return [
      ...change.changed.flatMap((n) => {
        const { objectNames, count } = groupShards(this.fleet.resolved(n) as ResolvedGroup);
        return [...objectNames, ...retired(n, count)];
      }),
      ...change.removed.flatMap((n) => retired(n, 0)),
    ];
  }

  /**
   * What each named routing object is to hold of the fleet as it is now: its slice of its group, or
   * nothing (retired); "pending" when one could not be reached. Those are pushed again by the alarm
   * until each has taken the fleet as it then is: a changed group's next request brings its change
   * along, but nothing else tells an object its group went, and an isolate still holding the old
   * fleet would be served by it. `retrying`: this is the alarm's try, and the next waits twice as long.
   */
  private async pushTo(objects: readonly string[], retrying = false): Promise<"applied" | "pending"> {
    if (objects.length === 0) return "applied";
    const sent = this.fleet.rev;
    const results = await Promise.allSettled(
      objects.map((o) => {
        const g = this.fleet.resolved(shardOfObject(o).group);
        const shards = g ? groupShards(g) : null;
        const at = shards ? shards.objectNames.indexOf(o) : -1;
        // A new group's objects are made here, before any Worker routes to them: placed by its hint or never.
        const object = groupObject(this.env, o, g?.locationHint);
        return shards && at >= 0 ? object.install(shards.views[at] as ResolvedGroup) : object.retire(this.fleet.rev);
      }),
    );
    const was = this.unpushed.size;
    let failed = 0;
    for (const [i, r] of results.entries()) {
      const o = objects[i] as string;
      if (r.status === "fulfilled") {
        // Not one a change made while this push was under way owes: that change's own push takes it off.
        if ((this.unpushed.get(o) ?? sent) <= sent) this.unpushed.delete(o);
        continue;
      }
      failed++;
      if (!this.unpushed.has(o)) this.unpushed.set(o, sent);
      console.error(`kvgate: pushing a fleet change to routing object ${o} failed: ${String(r.reason)}`);
    }
    if (this.unpushed.size === 0) {
      this.retryMs = PUSH_RETRY_MS.min;
      this.retryAt = null;
    } else if (retrying) {
      // Only a try's own failure doubles the wait.
      this.retryMs = Math.min(this.retryMs * 2, PUSH_RETRY_MS.max);
      this.retryAt = Date.now() + this.retryMs;
    } else if (this.retryAt === null || failed > 0) {
      // A failure brings the try forward from the hang guard (persist); one already due is not put off by later failures (nor by heartbeats).
      this.retryAt = Math.min(this.retryAt ?? Infinity, Date.now() + this.retryMs);
    }
    if (failed > 0 || this.unpushed.size !== was) this.storeUnpushed([...this.unpushed.keys()]);
    this.wake();
    return failed === 0 ? "applied" : "pending";
  }

  /** The alarm at the next heartbeat expiry, the next try of a push or of a failed write, the next hand-over or the next rewrite of a row of `groups` (FleetRows.rewriteDue), whichever comes first. */
  private wake(): void {
    if (this.fleet.givenUp().length === 0) this.handOverAt = null;
    else this.handOverAt ??= Date.now() + HAND_OVER_MS;
    const due = [this.fleet.nextWake(), this.retryAt, this.writeAgainAt, this.handOverAt, this.rows.rewriteDue()].filter((t) => t !== null);
    if (due.length > 0) void this.ctx.storage.setAlarm(Math.ceil(Math.min(...due)));
  }
}

/** The meta row saying the stored fleet is one that keeps registrationBindings (FleetRegistry.load's beforeBindingRule). */
const BINDING_RULE = "bindingRule";

/**
 * How often the objects of shards a group gave up are asked to hand their counts over: what they
 * hold in flight ends within a stream's length, and each try is a call to each of them.
 */
const HAND_OVER_MS = 5_000;

/**
 * How long a push may be under way before the alarm sends it again: an object slow to take its
 * group (restoring its state) is not sent it twice a second, each resend doubling the wait as a
 * failure would.
 */
const PUSH_HANG_MS = 10_000;

/** How long after a failed push the registry tries it again: doubling from the least to the most. */
const PUSH_RETRY_MS = { min: 1_000, max: 60_000 } as const;

/** The registry's event line for a change that changed something: heartbeats that move nothing write none. */
function logRegistry(op: string, rev: number, change: Change): void {
  if (change.changed.length + change.removed.length === 0) return;
  logEvent("registry", "info", { op, rev, changed: change.changed, removed: change.removed });
}
