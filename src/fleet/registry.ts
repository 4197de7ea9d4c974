import { fnv1a64 } from "../fnv64.ts";
import { canonicalJson } from "../config/version.ts";
import { modelIndex, type ConfigSeed } from "../config/load.ts";
import { deploymentId, fleetProblems, GATEWAY_KEY_NAMED, resolveDeployment, resolveGroup, type DeploymentState, type FleetProblem, type ResolvedGroup } from "../config/resolve.ts";
import { AUTH_DEFAULTS, MAX_DEPLOYMENTS, type DeploymentConfig, type GatewayConfig, type GroupSettings, type ModelGroupConfig } from "../config/schema.ts";
import { cleartextSecret } from "../config/private-hosts.ts";
import { gatewayKeyProblems, gatewayKeys, gatewayKeysNamed, unlistedSecretProblems, unlistedSecretsNamed, type GatewayKeys } from "../config/upstream-access.ts";
import { objectNamesOf, routingObjectNames } from "../sharding/partition.ts";
import type { GroupUpdate, Heartbeat, NewDeployment } from "./commands.ts";
import { settingsWithDefaults, specWithDefaults } from "./stored-defaults.ts";

/**
 * What one group's record may take as stored JSON. The registry stores a group as rows (its own,
 * and one per deployment), but each of its routing objects saves the group it routes as one value
 * of its storage, which holds at most 2 MB in production (Cloudflare's Durable Objects limits, "Key
 * and value combined"; local workerd takes more), and a write past it would fail after the change
 * was made. Half of it, for the state heartbeats and drains add to a group near it.
 */
export const GROUP_RECORD_MAX_BYTES = 1024 * 1024;
const UTF8 = new TextEncoder();

/** A group's record as stored, in bytes of UTF-8; encoded only when its length could be over the bound (3 bytes a UTF-16 unit at most). */
function storedBytes(g: GroupRecord): number {
  const json = JSON.stringify(g);
  return json.length * 3 <= GROUP_RECORD_MAX_BYTES ? json.length : UTF8.encode(json).length;
}

/** Who put a deployment or group there: the config's seed, the admin API, or a server's heartbeats. */
export type Source = "config" | "admin" | "heartbeat";

export interface DeploymentRecord {
  spec: DeploymentConfig & { id: string };
  state: DeploymentState;
  /**
   * The operator's drain or disable, kept apart from `state` because a lapsed TTL drains a server
   * too: its next heartbeat undoes that drain, never the operator's. Absent after an enable, and
   * in records stored before it was kept.
   */
  operatorState?: Exclude<DeploymentState, "active">;
  source: Source;
  /** A registered server: when its TTL runs out unless a heartbeat renews it (epoch ms). */
  expiresAt: number | null;
  /** A registered server past its TTL, draining: when it goes (never one the operator disabled: expire). */
  removeAt: number | null;
  ttlMs: number | null;
}

export interface GroupRecord {
  settings: GroupSettings;
  source: Source;
  /** The registry's revision at this group's last change. */
  rev: number;
  deployments: DeploymentRecord[];
  /**
   * The bindings the upgrade to registrationBindings listed for the group (BindingsKept): a seed
   * whose config gives the group no list keeps them, until the group is given another list (by
   * the config, a PATCH, a fleet PUT). Absent for every group the upgrade left as it was.
   */
  bindingsFromUpgrade?: string[];
  /**
   * The routing objects the group has had, when more than its `shards` now give it: the objects
   * of the shards it gave up finish the requests they hold, which are its deployments' until they
   * end, and hold what they counted until they hand it to the group's own object (handedOver).
   */
  objects?: number;
}

/** The names of every routing object that may hold requests of the group: its shards', and those of shards it gave up. */
export function routingObjectsOf(g: GroupRecord): string[] {
  return routingObjectNames(g.settings.name, g.settings.shards, g.objects);
}

/** A refused command: an OpenAI-style error's status, code, message and the field it names. */
export class RegistryError extends Error {
  readonly status: RefusalStatus;
  readonly code: string;
  readonly param: string | null;

  constructor(status: RefusalStatus, code: string, message: string, param: string | null = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.param = param;
  }
}

/**
 * A group as a change's request lists it: its name, and how many of its deployments the request
 * lists (the group's first ones, in the request's order); none when the request has no
 * deployments field (a group's PATCH).
 */
interface ListedGroup {
  name: string;
  deployments?: number;
}

/**
 * What a change's request holds, for a refusal to name the field as it has it: a whole fleet
 * (`modelGroups`: a PUT's, or the config's for its seed, in its order), one group (a POST, a
 * PATCH), or one deployment `of` a group (a POST, a PATCH, a heartbeat). Absent: a request
 * without one (a DELETE, a drain).
 */
type RequestBody = { fleet: readonly ListedGroup[] } | { group: ListedGroup } | { deployment: string; of: string };

/**
 * A fleet's problem with field `at` of group `g` as a refusal, named by the request's field where
 * the request holds it; else by its group, the request having no such field (a removal breaking
 * another group's fallback, an admin group a seed leaves without the group it falls back to).
 */
function refusal(status: RefusalStatus, code: string, g: GroupRecord, at: string, message: string, body: RequestBody | undefined): RegistryError {
  const field = requestField(at, g, body);
  if (field === null) return new RegistryError(status, code, `group "${g.settings.name}": ${at} ${message}`, null);
  return new RegistryError(status, code, `${field} ${message}`, field);
}

/**
 * A fleet rule's problem in `list` as a refusal: a clash with what the fleet holds beside the
 * request is a 409; a bad value, or a clash of the request with itself (a name or id it lists
 * twice), a 400. Told by the rule and where the other holder is, never by the message, which
 * holds names the user chose.
 */
function refusalOf(p: FleetProblem, list: readonly GroupRecord[], body: RequestBody | undefined): RegistryError {
  const clash = p.clash;
  const beside = clash !== undefined && requestField(clash.at, list[clash.group] as GroupRecord, body) === null;
  return refusal(beside ? 409 : 400, p.code ?? "invalid_fleet", list[p.group] as GroupRecord, p.at, p.message, body);
}

/** A fleet as a request lists it (a PUT's, or the config's for its seed), in its order. */
function listedFleet(groups: readonly { name: string; deployments: readonly unknown[] }[]): RequestBody {
  return { fleet: groups.map((g) => ({ name: g.name, deployments: g.deployments.length })) };
}

/** `at` (a field of group `g`) as the request names it; null when the request does not hold it. */
function requestField(at: string, g: GroupRecord, body: RequestBody | undefined): string | null {
  const name = g.settings.name;
  if (body === undefined) return null;
  if ("fleet" in body) {
    const gi = body.fleet.findIndex((l) => l.name === name);
    const listed = body.fleet[gi];
    const field = listed ? listedField(at, listed) : null;
    return field === null ? null : `modelGroups[${gi}].${field}`;
  }
  if ("group" in body) return body.group.name === name ? listedField(at, body.group) : null;
  if (body.of !== name) return null;
  const own = `deployments[${g.deployments.findIndex((d) => d.spec.id === body.deployment)}].`;
  return at.startsWith(own) ? at.slice(own.length) : null;
}

/** `at` (a field of a group) as a request listing the group so names it: null for deployments it does not list. */
function listedField(at: string, listed: ListedGroup): string | null {
  const deployment = /^deployments(?:\[(\d+)\])?/.exec(at);
  if (!deployment) return at;
  if (listed.deployments === undefined) return null;
  return deployment[1] === undefined || Number(deployment[1]) < listed.deployments ? at : null;
}

/** 403: a group closed to registration (`"registration": false`) takes no heartbeat, whatever else it says. */
export function refuseRegistration(into: GroupRecord): void {
  if (into.settings.registration) return;
  throw new RegistryError(403, "registration_not_allowed", `group "${into.settings.name}" takes no servers that register themselves (its registration is false): add the deployment through the admin API or the config`, "group");
}

/** 403: a heartbeat naming a secret the operator did not list for heartbeats. */
export type RefusalStatus = 400 | 403 | 404 | 409;

/** What the registry holds a fleet to beyond its own rules. */
export interface FleetRules {
  /**
   * What a deployment needs of the runtime (bindings, secrets) that it lacks; a change that adds
   * or alters a deployment needing any is refused like one that breaks a rule.
   */
  reachable?: (deployment: DeploymentConfig) => readonly { field: string; message: string }[];
  /** The config's auth: the gateway's own keys, which no deployment may name, and the secrets a heartbeat may (the schema's defaults when absent). */
  auth?: GatewayConfig["auth"];
}

/**
 * A stored deployment that named a secret it may no longer be sent (FleetRegistry.load): the
 * fields taken out, the secrets' names, and why — one of the gateway's keys (the deployment is
 * disabled), or a secret a heartbeat may not name (the server's registration lapses; `kept`, one
 * the operator disabled, which stays so).
 */
export interface Disarmed {
  group: string;
  deployment: string;
  fields: string[];
  secrets: string[];
  code: "gateway_key_named" | "secret_not_allowed";
  action: "disabled" | "lapsed" | "kept";
}

/**
 * A server that registered itself into a group that no longer takes it (UnroutedReason): the group
 * routes it nothing, and its renewals are refused.
 */
export interface Unrouted {
  reason: UnroutedReason;
  group: string;
  deployment: string;
  /** The binding it named (binding_not_allowed). */
  binding?: string;
}

/**
 * Bindings a group's self-registered servers named in a fleet stored before groups listed them
 * (FleetRegistry.load, once): the registry lists them in the group, so the upgrade leaves those
 * servers routed; from then on the list is the group's like any setting. And at a seed that gives
 * such a group no list of its own (no `deployments` then): the upgrade's list, kept.
 */
export interface BindingsKept {
  group: string;
  bindings: string[];
  deployments?: string[];
}

/**
 * What the registry's storage is to write since its last write (FleetRegistry.takeWrites): the
 * groups with anything to store and, of each, whether its own row changed (the group but its
 * deployments), which deployments' records did, and which of those only by a heartbeat renewing
 * them (`renewed`: their expiry moved, nothing else). The store finds what else a group's list
 * makes it write: a deployment gone, or one whose place in the list moved.
 */
export interface Writes {
  rev: number;
  seedHash: string | null;
  put: GroupRecord[];
  rows: Map<string, { own: boolean; deployments: Set<string>; renewed: Set<string> }>;
  deleted: string[];
}

/** Groups whose routing changed (to push to their objects), and groups that went. */
export interface Change {
  changed: string[];
  removed: string[];
}

const NONE: Change = { changed: [], removed: [] };

/** An alias a seed gave one of its groups that another group of the fleet holds, as its name or an alias: the holder keeps it. */
export interface HeldAlias {
  group: string;
  alias: string;
  holder: string;
}

/**
 * What a seed took out of one group: the deployments of the config's last seed it no longer lists,
 * and whether the group went with them (a config group left with none).
 */
export interface SeedRemoval {
  group: string;
  deployments: string[];
  groupRemoved: boolean;
}

/** A seed taken: what changed, the aliases its groups went without, the upgrade's bindings its groups kept, and what it took out. */
export interface Seeded extends Change {
  aliasesHeld: HeldAlias[];
  bindingsKept: BindingsKept[];
  removals: SeedRemoval[];
}

/**
 * The seed's hash as the registry stores it: of the config's groups as its text wrote them, keys
 * in a fixed order. A release that adds a setting with a default changes the groups it fills in,
 * never what was written, so its first start takes no seed again (which would undo what the admin
 * API did to the config's groups since). Marked, to tell it from the hash registries of before
 * stored (filledSeedHash).
 */
export function seedHashOf(written: unknown): string {
  return `written:${fnv1a64(canonicalJson(written))}`;
}

/** The hash registries of before stored: of the groups with every default filled in, as the release filled them. */
export function filledSeedHash(groups: readonly ModelGroupConfig[]): string {
  return fnv1a64(JSON.stringify(groups));
}

/** What a fleet stored by a registry of before a rule needs at load. */
export interface StoredBefore {
  /** Stored before groups listed registrationBindings: the one-time upgrade (BindingsKept) is due. */
  beforeBindingRule?: boolean;
}

/**
 * The fleet: model groups and their deployments, with what the operator and the servers said of
 * them. Pure: the registry's Durable Object persists what `takeWrites` hands it and pushes each
 * changed group to its routing object. Every command is checked against the whole fleet it would
 * make before it replaces the fleet, so a refused one leaves nothing half-applied.
 */
export class FleetRegistry {
  private readonly reachable: NonNullable<FleetRules["reachable"]>;
  private readonly keys: GatewayKeys;
  private readonly registrationSecrets: readonly string[];

  constructor({ reachable = () => [], auth = AUTH_DEFAULTS }: FleetRules = {}) {
    this.reachable = reachable;
    this.keys = gatewayKeys(auth);
    this.registrationSecrets = auth.registrationSecrets;
  }

  private groups = new Map<string, GroupRecord>();
  rev = 0;
  seedHash: string | null = null;
  /** Groups whose own row changed (all but their deployments), and, beside, deployments whose record changed: a heartbeat renewing one writes its row alone. */
  private dirty = new Set<string>();
  /** Of each group, its deployments whose record changed, each true while a renewal (its expiry alone) is all that did. */
  private dirtyDeployments = new Map<string, Map<string, boolean>>();
  private gone = new Set<string>();
  private resolvedCache = new Map<string, ResolvedGroup>();

  /** Restores what `takeWrites` handed out before; what it had to change, to store and push like any change. */
  load(rev: number, seedHash: string | null, groups: readonly GroupRecord[], now: number, before: StoredBefore = {}): { change: Change; disarmed: Disarmed[]; unrouted: Unrouted[]; bindingsKept: BindingsKept[] } {
    this.rev = rev;
    this.seedHash = seedHash;
    const filled = groups.map(withStoredDefaults);
    this.groups = new Map(filled.map((g) => [g.settings.name, g]));
    this.resolvedCache.clear();
    // Pushed like any change: a routing object holds the group as the registry last pushed it, without the setting.
    const defaulted = filled.filter((g, i) => canonicalJson(g) !== canonicalJson(groups[i])).map((g) => ({ group: g.settings.name }));
    const bindingsKept = before.beforeBindingRule ? this.keepBindingsInUse() : [];
    const disarmed = this.disarm(now);
    const change = this.revised([...new Set([...defaulted, ...bindingsKept, ...disarmed].map((x) => x.group))]);
    return { change, disarmed, unrouted: this.unrouted(), bindingsKept };
  }

  /** Groups the load changed: the next revision, stored and pushed like any change. */
  private revised(changed: string[]): Change {
    if (changed.length === 0) return NONE;
    this.rev += 1;
    for (const name of changed) {
      const g = this.groups.get(name) as GroupRecord;
      g.rev = this.rev;
      this.dirty.add(name);
      // Its settings, or specs (filled in, disarmed), or both: rare enough to write the group whole.
      for (const d of g.deployments) this.deploymentChanged(name, d.spec.id);
    }
    this.resolvedCache.clear();
    return { changed, removed: [] };
  }

  /**
   * The upgrade to registrationBindings, once (the registry's Durable Object knows when the fleet
   * was stored before it): every group whose settings list no binding (none could) and whose
   * self-registered servers name some lists those, so that the deploy takes none of them out of
   * routing, nor refuses their renewals. An API-made group could not be given its list in that
   * deploy: the old Worker refuses a field it does not know, and a PATCH after the deploy comes
   * after the servers were left out. From then on the list is the group's, and the rule holds:
   * another binding is refused. A group whose servers name none lists none (absent: none).
   */
  private keepBindingsInUse(): BindingsKept[] {
    const kept: BindingsKept[] = [];
    for (const [name, g] of this.groups) {
      if (g.settings.registrationBindings !== undefined) continue;
      const servers = g.deployments.filter((d) => d.source === "heartbeat" && d.spec.binding !== undefined);
      if (servers.length === 0) continue;
      const bindings = [...new Set(servers.map((d) => d.spec.binding as string))];
      g.settings = { ...g.settings, registrationBindings: bindings };
      g.bindingsFromUpgrade = bindings;
      kept.push({ group: name, bindings, deployments: servers.map((d) => d.spec.id) });
    }
    return kept;
  }

  /**
   * Servers routed nothing for the group they registered into or the binding they named: told
   * when the registry starts (after the config's seed), so the deploy that closes a group or drops
   * a binding from its list names each server it left out.
   */
  unrouted(): Unrouted[] {
    const out: Unrouted[] = [];
    for (const [name, g] of this.groups) {
      for (const d of g.deployments) {
        const reason = unroutedReason(d, g.settings);
        if (reason !== null) out.push({ reason, group: name, deployment: d.spec.id, ...(reason === "binding_not_allowed" ? { binding: d.spec.binding as string } : {}) });
      }
    }
    return out;
  }

  /**
   * A deployment stored before the gateway's keys were refused may name one (a heartbeat with the
   * register key could, and have the admin key sent to an address of its choosing). Each such
   * deployment loses the fields that name them and is disabled, as by the operator (its
   * heartbeats do not undo it), at once: not through the whole fleet's check, which refuses the
   * fleet as stored (that very deployment) and would leave the key being sent. Disabled rather
   * than removed: the operator sees it, and decides. A self-registered server naming a secret the
   * config no longer lists for heartbeats loses those fields too, and its registration lapses;
   * unless the operator disabled it: it stays so, kept (expire), until enabled or removed.
   */
  private disarm(now: number): Disarmed[] {
    const disarmed: Disarmed[] = [];
    for (const [name, g] of this.groups) {
      for (const d of g.deployments) {
        const keys = gatewayKeysNamed(d.spec, this.keys);
        // A self-registered server's renewal naming a secret no longer listed is refused; until its
        // TTL ran out it would still be sent that secret, so its registration lapses now.
        const unlisted = keys.length === 0 && d.source === "heartbeat" ? unlistedSecretsNamed(d.spec, this.registrationSecrets) : [];
        const named = keys.length > 0 ? keys : unlisted;
        if (named.length === 0) continue;
        d.spec = withoutSecrets(d.spec, named);
        if (keys.length > 0) d.state = d.operatorState = "disabled";
        // A removal set on a row expire() keeps (its lapse's, before it was disabled) would be shown and never made.
        const kept = keptPastTTL(d);
        if (kept) d.removeAt = null;
        else lapse(d, now);
        const why = keys.length > 0 ? ({ code: "gateway_key_named", action: "disabled" } as const) : ({ code: "secret_not_allowed", action: kept ? "kept" : "lapsed" } as const);
        disarmed.push({ group: name, deployment: d.spec.id, fields: named.map((n) => n.field), secrets: named.map((n) => n.name), ...why });
      }
    }
    return disarmed;
  }

  /** Group names in the order they were added. */
  names(): string[] {
    return [...this.groups.keys()];
  }

  group(name: string): GroupRecord | undefined {
    return this.groups.get(name);
  }

  /** The group as the Worker and its routing object use it. */
  resolved(name: string): ResolvedGroup | undefined {
    const cached = this.resolvedCache.get(name);
    if (cached) return cached;
    const g = this.groups.get(name);
    if (!g) return undefined;
    const r = resolveGroup(
      g.settings,
      g.deployments.filter((d) => unroutedReason(d, g.settings) === null).map((d) => resolveDeployment(d.spec, d.state)),
      g.rev,
    );
    this.resolvedCache.set(name, r);
    return r;
  }

  snapshot(): ResolvedGroup[] {
    return this.names().map((n) => this.resolved(n) as ResolvedGroup);
  }

  /** The fleet in the config's shape (what `PUT /admin/v1/fleet` takes back). */
  exported(): ModelGroupConfig[] {
    return [...this.groups.values()].map((g) => ({ ...g.settings, deployments: g.deployments.map((d) => d.spec) }));
  }

  /**
   * The spec of `group`'s deployment that `listed` (a deployment of a `PUT` of the fleet, as the
   * body gives it) lists exactly as the fleet holds it, or undefined: what an export gave back.
   */
  heldAs(group: unknown, listed: unknown): DeploymentRecord["spec"] | undefined {
    if (typeof group !== "string" || typeof listed !== "object" || listed === null || !("id" in listed)) return undefined;
    const was = this.groups.get(group)?.deployments.find((d) => d.spec.id === listed.id);
    return was && canonicalJson(was.spec) === canonicalJson(listed) ? was.spec : undefined;
  }

  /**
   * The config's groups, when they differ from the seed taken last (null when they do not): a seed
   * group's settings and its config deployments become the seed's (an operator's drain or disable
   * of one that stays is kept, of one a `fleet apply` edited, the operator's since, too);
   * deployments the API or heartbeats added stay. A group the config no longer
   * lists loses the config's deployments; it goes when it is the config's and none is left (one the
   * admin API made stays). An alias another group holds stays with it, and the seed's group goes without
   * (`aliasesHeld`): refusing the whole seed for it would leave every group of the config as the
   * last deploy had it, routing to the servers this one replaced. A seed that breaks another rule
   * (a group named as another's alias, a fallback to a group it drops) is refused whole, its hash
   * not taken, so that the registry tries it again when it next starts. A group the config gives
   * no registrationBindings keeps the bindings the upgrade listed for it (`bindingsKept`): the
   * config of the deploy that brings the rule could not know them, and a seed that took them away
   * would drop the servers the upgrade kept; the config's own list, [] included, replaces them.
   * What the seed took out (a config's server it no longer lists, a group with none left) is
   * named in `removals`.
   */
  seed({ groups, written }: ConfigSeed): Seeded | null {
    const hash = seedHashOf(written);
    if (hash === this.seedHash) return null;
    // The first start of the release that hashes the config as written: a registry of before
    // stored the hash of the groups filled in. When they are these, as this release fills them
    // in, the deploy brought the same modelGroups: the seed is taken already, and only its new
    // hash is stored (a release that also adds a setting takes the seed once more, as before).
    if (this.seedHash === filledSeedHash(groups)) {
      this.seedHash = hash;
      return null;
    }
    const next = this.copy();
    const seeded = new Set(groups.map((g) => g.name));
    // A group the config no longer lists loses the config's servers, whoever made it: one the admin
    // API made and a config then listed holds the config's too. It goes only when it was the
    // config's and has nothing left; the admin API's stays, as its own commands left it.
    for (const [name, g] of next) {
      if (seeded.has(name)) continue;
      g.deployments = g.deployments.filter((d) => d.source !== "config");
      if (g.source === "config" && g.deployments.length === 0) next.delete(name);
    }
    const holders = modelIndex([...next.values()].flatMap((g) => (seeded.has(g.settings.name) ? [] : [g.settings])));
    const aliasesHeld: HeldAlias[] = [];
    const bindingsKept: BindingsKept[] = [];
    for (const { deployments, ...given } of groups) {
      const before = next.get(given.name);
      const fromUpgrade = given.registrationBindings === undefined ? before?.bindingsFromUpgrade : undefined;
      const settings = { ...given, aliases: given.aliases.filter((alias) => !holders.has(alias)), ...(fromUpgrade ? { registrationBindings: fromUpgrade } : {}) };
      for (const alias of given.aliases) {
        const holder = holders.get(alias);
        if (holder) aliasesHeld.push({ group: given.name, alias, holder: holder.name });
      }
      if (fromUpgrade) bindingsKept.push({ group: given.name, bindings: fromUpgrade });
      const kept = before ? before.deployments.filter((d) => d.source !== "config" && !deployments.some((s) => deploymentId(s) === d.spec.id)) : [];
      const fromSeed = deployments.map((spec): DeploymentRecord => {
        const id = deploymentId(spec);
        const was = before?.deployments.find((d) => d.spec.id === id && d.source !== "heartbeat");
        const word = was ? heldState(was) : undefined;
        return { spec: { ...spec, id }, state: word ?? "active", ...(word ? { operatorState: word } : {}), source: "config", expiresAt: null, removeAt: null, ttlMs: null };
      });
      next.set(settings.name, { settings, source: before?.source ?? "config", rev: before?.rev ?? 0, deployments: [...fromSeed, ...kept], ...(fromUpgrade ? { bindingsFromUpgrade: fromUpgrade } : {}) });
    }
    const removals = this.removedBy(next);
    // The config's deployments come first in each of its groups (fromSeed): those are the ones it lists.
    const change = this.commit(next, listedFleet(groups));
    this.seedHash = hash;
    return { ...change, aliasesHeld, bindingsKept, removals };
  }

  /** The deployments the fleet holds that `next` does not, by group, and the groups that go. */
  private removedBy(next: ReadonlyMap<string, GroupRecord>): SeedRemoval[] {
    const removals: SeedRemoval[] = [];
    for (const [name, g] of this.groups) {
      const after = next.get(name);
      const deployments = g.deployments.filter((d) => !after?.deployments.some((a) => a.spec.id === d.spec.id)).map((d) => d.spec.id);
      if (deployments.length > 0 || !after) removals.push({ group: name, deployments, groupRemoved: !after });
    }
    return removals;
  }

  /**
   * Replaces the whole fleet's specs (the API's `PUT /admin/v1/fleet`), so that what `exported`
   * gave back changes nothing: a deployment listed again as it was stays as it was — the config's
   * (which the next deploy's seed replaces), a registered server's (its TTL running), the
   * operator's drain or disable held — and a group stays whoever's it was. One listed with
   * another spec becomes the operator's, keeping a drain or disable. `readAt`: the revision the
   * fleet was exported at, when the PUT carries it back.
   */
  replace(groups: readonly ModelGroupConfig[], readAt?: number): Change {
    // An export edited and put back must not undo what changed since it was read: a drain, a
    // deployment added, a server's registration.
    if (readAt !== undefined && readAt !== this.rev) {
      throw new RegistryError(409, "fleet_changed", `the fleet changed since revision ${readAt} (it is at ${this.rev}): export it again and make the edit there`, "rev");
    }
    const next = new Map<string, GroupRecord>();
    for (const [gi, { deployments, ...settings }] of groups.entries()) {
      if (next.has(settings.name)) throw new RegistryError(400, "invalid_value", `group "${settings.name}" is listed twice`, "modelGroups");
      const group = this.groups.get(settings.name);
      const before = group?.deployments ?? [];
      next.set(settings.name, {
        settings,
        ...upgradeBindingsKept(group, settings),
        source: group?.source ?? "admin",
        rev: 0,
        deployments: deployments.map((given, di) => {
          const spec = { ...given, id: deploymentId(given) };
          const was = before.find((d) => d.spec.id === spec.id);
          if (was && sameSpec(was.spec, spec)) return { ...was };
          refuseCleartext(spec, `modelGroups[${gi}].deployments[${di}].baseUrl`);
          const word = was ? heldState(was) : undefined;
          return word ? { ...adminRecord(spec), state: word, operatorState: word } : adminRecord(spec);
        }),
      });
    }
    return this.commit(next, listedFleet(groups));
  }

  addGroup(group: ModelGroupConfig): Change {
    if (this.groups.has(group.name)) throw new RegistryError(409, "group_exists", `group "${group.name}" already exists`, "name");
    const { deployments, ...settings } = group;
    for (const [di, spec] of deployments.entries()) this.refuseSecrets(spec, "admin", false, `deployments[${di}].`);
    const next = this.copy();
    next.set(group.name, { settings, source: "admin", rev: 0, deployments: deployments.map((spec) => adminRecord({ ...spec, id: deploymentId(spec) })) });
    return this.commit(next, { group: { name: group.name, deployments: deployments.length } });
  }

  /** The group's settings as `update` makes them of its current ones; its name stays. `readAt`: the group's revision the update was decided at, when it carries it. */
  updateGroup(name: string, update: (current: GroupSettings) => GroupUpdate, readAt?: number): Change {
    const next = this.copy();
    const g = this.need(next, name);
    refuseMoved(g, readAt);
    g.settings = { name, ...update(g.settings) };
    if (!upgradeBindingsKept(g, g.settings).bindingsFromUpgrade) delete g.bindingsFromUpgrade;
    return this.commit(next, { group: { name } });
  }

  removeGroup(name: string, readAt?: number): Change {
    const next = this.copy();
    refuseMoved(this.need(next, name), readAt);
    next.delete(name);
    return this.commit(next);
  }

  addDeployment(group: string, spec: NewDeployment): Change {
    const next = this.copy();
    const g = this.need(next, group);
    if (g.deployments.some((d) => d.spec.id === spec.id)) throw new RegistryError(409, "deployment_exists", `deployment "${spec.id}" already exists in group "${group}"`, "id");
    this.refuseSecrets(spec, "admin");
    g.deployments.push(adminRecord(spec));
    return this.commit(next, { deployment: spec.id, of: group });
  }

  /** The deployment's spec as `update` makes it of its current one (a PATCH merged and checked whole); its id stays. */
  updateDeployment(group: string, id: string, update: (current: DeploymentRecord["spec"]) => NewDeployment, readAt?: number): Change {
    const next = this.copy();
    const d = this.needDeployment(next, group, id);
    refuseMoved(this.need(next, group), readAt);
    if (d.source === "heartbeat") {
      throw new RegistryError(409, "deployment_registered", `deployment "${id}" of group "${group}" registers itself: its heartbeats set its spec, and its next one would undo this change (change what the server sends; a drain or disable here holds)`, "id");
    }
    d.spec = { ...update(d.spec), id };
    this.refuseSecrets(d.spec, "admin");
    return this.commit(next, { deployment: id, of: group });
  }

  setState(group: string, id: string, state: DeploymentState, now: number): Change {
    const next = this.copy();
    const d = this.needDeployment(next, group, id);
    const word = state === "active" ? undefined : state;
    // Drained by a lapsed TTL, a server's state is the one asked for already, but not the operator's word yet.
    if (d.state === state && d.operatorState === word) return NONE;
    d.state = state;
    if (word) d.operatorState = word;
    else delete d.operatorState;
    // An operator's word outlasts a registration: a server enabled again is no longer on its way out.
    d.removeAt = null;
    // Nor drained again by the expiry that ran out already (at once, by the next alarm): enabled or
    // drained, it gets one TTL from now, which its heartbeats renew; a server that never comes back
    // lapses again, rather than stay active at a dead address for good, or go before a drain's
    // `--wait` sees it drained. A disable keeps it whatever its TTL (expire).
    if (word !== "disabled" && d.expiresAt !== null && d.expiresAt <= now) d.expiresAt = d.ttlMs === null ? null : now + d.ttlMs;
    return this.commit(next);
  }

  removeDeployment(group: string, id: string, readAt?: number): Change {
    const next = this.copy();
    const g = this.need(next, group);
    this.needDeployment(next, group, id);
    refuseMoved(g, readAt);
    g.deployments = g.deployments.filter((d) => d.spec.id !== id);
    return this.commit(next);
  }

  /**
   * A server's registration or its renewal. A renewal that changes nothing routing sees only
   * moves its expiry: no new revision, nothing pushed.
   */
  heartbeat(h: Heartbeat, now: number): Change {
    const { group, ttlSeconds, ...spec } = h;
    const ttlMs = ttlSeconds * 1000;
    const into = this.need(this.groups, group);
    refuseRegistration(into);
    if (!bindingListed(spec, into.settings)) {
      throw new RegistryError(403, "binding_not_allowed", `binding names ${spec.binding}, which group "${group}" does not list for servers that register themselves: add it to the group's registrationBindings, or add the deployment through the admin API`, "binding");
    }
    const live = into.deployments.find((d) => d.spec.id === spec.id);
    if (live && live.source !== "heartbeat") {
      throw new RegistryError(409, "deployment_exists", `deployment "${spec.id}" of group "${group}" was added by ${live.source === "config" ? "the config" : "the admin API"}; heartbeats renew only servers that registered themselves`, "id");
    }
    // As the server sent it last: the common renewal, compared once (key order aside only when that fails).
    const asSent = live !== undefined && JSON.stringify(live.spec) === JSON.stringify(spec);
    // Before the renewal below, which skips the fleet's check: a secret no longer listed stops renewing.
    this.refuseSecrets(spec, "heartbeat", asSent || (live !== undefined && sameSpec(live.spec, spec)));
    const word = live ? heldState(live) : undefined;
    const state = word ?? "active";
    if (live && live.state === state && asSent) {
      // The common case, every few seconds per server: no copy of the fleet, no check, no revision.
      // A new TTL is no renewal for the store: the release before's row of the group is to have it at once.
      const renewal = live.ttlMs === ttlMs;
      live.expiresAt = now + ttlMs;
      live.removeAt = null;
      live.ttlMs = ttlMs;
      this.deploymentChanged(group, live.spec.id, renewal);
      return NONE;
    }
    const next = this.copy();
    const g = this.need(next, group);
    const record: DeploymentRecord = { spec, state, ...(word ? { operatorState: word } : {}), source: "heartbeat", expiresAt: now + ttlMs, removeAt: null, ttlMs };
    const at = g.deployments.findIndex((d) => d.spec.id === spec.id);
    if (at >= 0) g.deployments[at] = record;
    else g.deployments.push(record);
    return this.commit(next, { deployment: spec.id, of: group });
  }

  /**
   * Registered servers past their TTL drain; a TTL later they go. Not one the operator disabled
   * (keptPastTTL): its record holds that word, and a server back after its heartbeats paused (a
   * restart, a failing /health) would register again as active. It stays, its lapsed expiry shown,
   * until the operator enables it (one TTL from then: setState) or removes it. A drain is not
   * kept so: it is how a server is retired (drain --wait, then stop it), and each such row kept
   * would count against its group's deployments and split its prefix budget for ever.
   */
  expire(now: number): Change {
    const next = this.copy();
    let any = false;
    for (const g of next.values()) {
      const before = g.deployments.length;
      g.deployments = g.deployments.filter((d) => d.removeAt === null || d.removeAt > now || keptPastTTL(d));
      if (g.deployments.length !== before) any = true;
      for (const d of g.deployments) {
        if (keptPastTTL(d)) {
          // A removal set before the operator's word (stored so) is not due: no alarm for it.
          if (d.removeAt !== null) any = true;
          d.removeAt = null;
          continue;
        }
        if (d.expiresAt === null || d.expiresAt > now || d.removeAt !== null) continue;
        if (d.state === "active") d.state = "draining";
        d.removeAt = d.expiresAt + (d.ttlMs ?? 0);
        any = true;
      }
    }
    // Unchecked: draining and removing registered servers breaks no rule, and a lapsed server must
    // stop taking requests whatever else the fleet holds.
    return any ? this.install(next) : NONE;
  }

  /** When `expire` next has something to do. */
  nextWake(): number | null {
    let at: number | null = null;
    for (const g of this.groups.values()) {
      for (const d of g.deployments) {
        // The operator's disable stops the clock (expire).
        if (keptPastTTL(d)) continue;
        const due = d.removeAt ?? d.expiresAt;
        if (due !== null && (at === null || due < at)) at = due;
      }
    }
    return at;
  }

  /**
   * The groups with objects of shards they gave up (GroupRecord.objects), each with its own object
   * (which takes their counts), those objects, and the `shards` and `objects` handedOver checks.
   */
  givenUp(): { group: string; own: string; retired: string[]; shards: number; objects: number }[] {
    return [...this.groups.values()].flatMap((g) => {
      if (g.objects === undefined) return [];
      const name = g.settings.name;
      const all = routingObjectsOf(g);
      const shards = objectNamesOf(name, g.settings.shards).length;
      return [{ group: name, own: all[0] as string, retired: all.slice(shards), shards, objects: g.objects }];
    });
  }

  /**
   * The objects of shards `group` gave up handed their counts to its own object, with nothing in
   * flight: they are listed no more (FleetSnapshot.objects, the admin API's rows). Not when the
   * group's shards changed since they were asked (`shards`, `objects`): then others may be retired.
   */
  handedOver(group: string, shards: number, objects: number): boolean {
    const g = this.groups.get(group);
    if (!g || g.objects !== objects || objectNamesOf(group, g.settings.shards).length !== shards) return false;
    delete g.objects;
    this.dirty.add(group);
    return true;
  }

  /** What to write and to delete since the last call, with the registry's revision. */
  takeWrites(): Writes {
    const rows: Writes["rows"] = new Map();
    for (const n of new Set([...this.dirty, ...this.dirtyDeployments.keys()])) {
      if (!this.groups.has(n)) continue;
      const ids = this.dirtyDeployments.get(n) ?? new Map<string, boolean>();
      rows.set(n, { own: this.dirty.has(n), deployments: new Set(ids.keys()), renewed: new Set([...ids].flatMap(([id, renewal]) => (renewal ? [id] : []))) });
    }
    const put = [...rows.keys()].map((n) => this.groups.get(n) as GroupRecord);
    const deleted = [...this.gone];
    this.dirty.clear();
    this.dirtyDeployments.clear();
    this.gone.clear();
    return { rev: this.rev, seedHash: this.seedHash, put, rows, deleted };
  }

  /**
   * Writes taken (takeWrites) that the store did not write, its transaction having failed: marked
   * again, so the next write stores them. Taken, they were marked no more, and a later change to
   * the group writes only its own rows: the change was lost at the next restart.
   */
  requeue(w: Writes): void {
    for (const n of w.deleted) this.gone.add(n);
    for (const [n, r] of w.rows) {
      if (!this.groups.has(n)) continue;
      if (r.own) this.dirty.add(n);
      for (const id of r.deployments) this.deploymentChanged(n, id, r.renewed.has(id));
    }
  }

  /** `renewal`: a heartbeat moved its expiry, nothing else; a change of any other kind to the same record since is kept as one. */
  private deploymentChanged(group: string, id: string, renewal = false): void {
    let ids = this.dirtyDeployments.get(group);
    if (!ids) this.dirtyDeployments.set(group, (ids = new Map()));
    ids.set(id, renewal && (ids.get(id) ?? true));
  }

  /** What of group `after` differs from `before` as stored: its own row, and each deployment whose record is new or changed. */
  private changedRows(after: GroupRecord, before: GroupRecord | undefined): void {
    const name = after.settings.name;
    if (!before || JSON.stringify(ownRow(before)) !== JSON.stringify(ownRow(after))) this.dirty.add(name);
    const was = new Map(before?.deployments.map((d) => [d.spec.id, d]));
    for (const d of after.deployments) {
      const w = was.get(d.spec.id);
      if (w !== d && JSON.stringify(w) !== JSON.stringify(d)) this.deploymentChanged(name, d.spec.id);
    }
  }

  /** A deep enough copy to change: the groups, their deployment lists and records. */
  private copy(): Map<string, GroupRecord> {
    return new Map([...this.groups].map(([n, g]) => [n, { ...g, deployments: g.deployments.map((d) => ({ ...d })) }]));
  }

  /**
   * The secrets one deployment names, as `source` asks for it; checked before the fleet's whole
   * check (which names the same problem by its place in the fleet) so that the error names the
   * field of the request (`at`: where the deployment is in it). `renewed`: a registered server's
   * renewal of the spec it has, which is no change: what it lacks of the runtime (a secret a
   * deploy took away), or a plain-http address stored before that rule, stops no renewal, as the
   * fleet's check stops none (`unreachable`); the gateway's keys and the secrets heartbeats may
   * name still do. A heartbeat's secrets are checked against the list before any is looked up:
   * what the lookup finds (not set, empty, a binding) would tell the register key's holder which
   * names the Worker has; only the names the operator listed get that far.
   */
  private refuseSecrets(spec: DeploymentConfig, source: Source, renewed = false, at = ""): void {
    const own = gatewayKeyProblems(spec, this.keys)[0];
    if (own) throw new RegistryError(400, GATEWAY_KEY_NAMED, `${at}${own.field} ${own.message}`, `${at}${own.field}`);
    const unlisted = source === "heartbeat" ? unlistedSecretProblems(spec, this.registrationSecrets)[0] : undefined;
    if (unlisted) throw new RegistryError(403, "secret_not_allowed", `${unlisted.field} ${unlisted.message}`, unlisted.field);
    if (!renewed) this.refuseUnreachable(spec, at);
  }

  /** A deployment that would send its secrets in cleartext, or needs of the runtime what it lacks, named by its own fields (`at`: where it is in the request). */
  private refuseUnreachable(spec: DeploymentConfig, at = ""): void {
    refuseCleartext(spec, `${at}baseUrl`);
    // What the fleet's whole check would name by its place in the fleet, named by the request's own field.
    const lacking = this.reachable(spec)[0];
    if (lacking) throw new RegistryError(400, "invalid_fleet", `${at}${lacking.field} ${lacking.message}`, `${at}${lacking.field}`);
  }

  private need(fleet: Map<string, GroupRecord>, name: string): GroupRecord {
    const g = fleet.get(name);
    if (!g) throw new RegistryError(404, "group_not_found", `no group "${name}" in the fleet`, "group");
    return g;
  }

  private needDeployment(fleet: Map<string, GroupRecord>, group: string, id: string): DeploymentRecord {
    const d = this.need(fleet, group).deployments.find((x) => x.spec.id === id);
    if (!d) throw new RegistryError(404, "deployment_not_found", `no deployment "${id}" in group "${group}"`, "id");
    return d;
  }

  /**
   * The first thing a deployment that `next` adds, alters or puts back into routing needs of the
   * runtime and lacks. Only those: a deployment the registry holds already that lacks something (a
   * deploy took away a secret it names) answers its requests with a 500 saying what, as before,
   * and must not stop the changes that leave it as it is (a drain of another, a heartbeat, the
   * expiry of a lapsed registration) nor the ones that take it out of routing.
   */
  private unreachable(next: readonly GroupRecord[]): { g: GroupRecord; at: string; message: string } | null {
    for (const g of next) {
      const held = new Map(this.groups.get(g.settings.name)?.deployments.map((d) => [d.spec.id, d]));
      for (const [di, d] of g.deployments.entries()) {
        const was = held.get(d.spec.id);
        // A copy of the fleet shares the specs it leaves alone; a seed or a replace lists them anew.
        const same = was !== undefined && sameSpec(was.spec, d.spec);
        if (same && !(was.state !== "active" && d.state === "active")) continue;
        const problem = this.reachable(d.spec)[0];
        if (problem) return { g, at: `deployments[${di}].${problem.field}`, message: problem.message };
      }
    }
    return null;
  }

  /** Checks the fleet `next` as a whole and, when it holds, makes it the registry's. `body`: what the change's request holds. */
  private commit(next: Map<string, GroupRecord>, body?: RequestBody): Change {
    this.refuseBroken([...next.values()], body);
    return this.install(next);
  }

  /** Refuses the fleet `next` when it breaks one of the registry's rules, or needs of the runtime what it lacks. */
  private refuseBroken(list: readonly GroupRecord[], body: RequestBody | undefined): void {
    const own = body && "group" in body ? body.group.name : undefined;
    // The request's group checked last: a name or alias it shares with another group is then its own field's problem, whichever the fleet lists first.
    const ordered = own === undefined ? list : [...list.filter((g) => g.settings.name !== own), ...list.filter((g) => g.settings.name === own)];
    const shapes = ordered.map((g) => ({ ...g.settings, deployments: g.deployments.map((d) => d.spec) }));
    const problem = fleetProblems(shapes, this.keys).find((p) => !this.namedTwiceBefore(p, ordered));
    if (problem) throw refusalOf(problem, ordered, body);
    const unreachable = this.unreachable(list);
    if (unreachable) throw refusal(400, "invalid_fleet", unreachable.g, unreachable.at, unreachable.message, body);
    const tooMany = list.find((g) => g.deployments.length > MAX_DEPLOYMENTS);
    if (tooMany) throw new RegistryError(400, "too_many_deployments", `group "${tooMany.settings.name}" would have more than ${MAX_DEPLOYMENTS} deployments`, requestField("deployments", tooMany, body));
    for (const g of list) {
      const bytes = storedBytes(g);
      if (bytes <= GROUP_RECORD_MAX_BYTES) continue;
      // A group stored over the bound before it was one may shrink, and stops no other group's change.
      const before = this.groups.get(g.settings.name);
      if (before && bytes <= storedBytes(before)) continue;
      throw new RegistryError(400, "group_too_large", `group "${g.settings.name}" would be ${bytes} bytes as stored, over the ${GROUP_RECORD_MAX_BYTES} one group may take (split it into groups, or shorten what its deployments carry)`, requestField("deployments", g, body));
    }
  }

  /**
   * A name its group lists twice (an alias twice, its own name as an alias) stored before the rule
   * refused it: every change checks the fleet whole, and each would be refused for it. It passes
   * while the group's aliases stay as stored; a change of them is checked.
   */
  private namedTwiceBefore(p: FleetProblem, list: readonly GroupRecord[]): boolean {
    if (p.clash?.group !== p.group || !p.at.startsWith("aliases[")) return false;
    const g = list[p.group] as GroupRecord;
    const before = this.groups.get(g.settings.name);
    return before !== undefined && JSON.stringify(before.settings.aliases) === JSON.stringify(g.settings.aliases);
  }

  /** Makes `next` the registry's fleet: each group whose routing changed gets the next revision. */
  private install(next: Map<string, GroupRecord>): Change {
    const list = [...next.values()];
    const changed: string[] = [];
    const rev = this.rev + 1;
    for (const g of list) {
      const name = g.settings.name;
      const before = this.groups.get(name);
      const had = before ? routingObjectsOf(before).length : 0;
      if (had > objectNamesOf(name, g.settings.shards).length) g.objects = had;
      else delete g.objects;
      if (before && sameRouting(before, g)) {
        g.rev = before.rev;
        if (!sameRecords(before, g)) this.changedRows(g, before);
        continue;
      }
      g.rev = rev;
      changed.push(name);
      this.changedRows(g, before);
      this.resolvedCache.delete(name);
    }
    const removed = [...this.groups.keys()].filter((n) => !next.has(n));
    for (const n of removed) {
      this.gone.add(n);
      this.dirty.delete(n);
      this.dirtyDeployments.delete(n);
      this.resolvedCache.delete(n);
    }
    if (changed.length + removed.length > 0) this.rev = rev;
    this.groups = next;
    return { changed, removed };
  }
}

/**
 * The state the operator set and a heartbeat keeps, if any. A record without the operator's word
 * kept apart (stored before it was, or a config deployment a seed listed again) has its state
 * alone: a disable there can only be the operator's, and so can any drain but a registered
 * server's, which may be a lapsed TTL's (a server that came back takes requests again).
 */
function heldState(d: DeploymentRecord): DeploymentRecord["operatorState"] {
  if (d.operatorState !== undefined || d.state === "active") return d.operatorState;
  return d.state === "disabled" || d.source !== "heartbeat" ? d.state : undefined;
}

/**
 * A registered server whose TTL running out neither drains nor removes it: one the operator
 * disabled, which would otherwise come back active at its next heartbeat. Its row stays until the
 * operator enables or removes it. A drain lasts only while the server's heartbeats come.
 */
function keptPastTTL(d: DeploymentRecord): boolean {
  return heldState(d) === "disabled";
}

/**
 * A change decided on the group as it was at revision `readAt` (what its GET gave), when the
 * group has moved on since: made anyway, it would undo what it did not see — another operator's
 * alias added to a list a PATCH replaces whole, a deployment's drain. A group's revision moves
 * with every change to its settings or its deployments' specs and states (install), and never
 * back: one removed and added again takes a newer one. A deployment has no revision of its own.
 */
function refuseMoved(g: GroupRecord, readAt: number | undefined): void {
  if (readAt === undefined || readAt === g.rev) return;
  throw new RegistryError(409, "group_changed", `group "${g.settings.name}" changed since revision ${readAt} (it is at ${g.rev}): read it again and make the change there`, "rev");
}

/**
 * Whether a server registering itself into a group may use the binding it names (none, or one the
 * group's registrationBindings lists). Checked before whether the binding exists, so a heartbeat
 * learns nothing of the Worker's bindings or secrets by the names it tries.
 */
function bindingListed(spec: Pick<DeploymentConfig, "binding">, settings: Pick<GroupSettings, "registrationBindings">): boolean {
  return spec.binding === undefined || (settings.registrationBindings ?? []).includes(spec.binding);
}

/** The upgrade's bindings of `g` (GroupRecord.bindingsFromUpgrade), still its own while `settings` list those and no other. */
function upgradeBindingsKept(g: GroupRecord | undefined, settings: GroupSettings): Pick<GroupRecord, "bindingsFromUpgrade"> {
  const kept = g?.bindingsFromUpgrade;
  return kept && JSON.stringify(kept) === JSON.stringify(settings.registrationBindings) ? { bindingsFromUpgrade: kept } : {};
}

/** Why a group routes a deployment nothing whatever its state (the admin API's rows say it). */
export type UnroutedReason = "registration_not_allowed" | "binding_not_allowed";

/**
 * Why the group whose settings are `settings` routes `d` nothing whatever its state, or null when
 * its state decides. A registered server in a group the operator closed to registration, or whose
 * binding the group no longer lists (the operator took it off), is routed no request from the
 * moment the group changes; its renewals are refused, and it goes a TTL or two later like any
 * lapsed server, unless the operator disabled it: that row stays until enabled (it lapses a TTL
 * later) or removed. The one rule the group as routed, the registry's load and the admin API's
 * rows all read.
 */
export function unroutedReason(d: Pick<DeploymentRecord, "source" | "spec">, settings: Pick<GroupSettings, "registration" | "registrationBindings">): UnroutedReason | null {
  if (d.source !== "heartbeat") return null;
  if (!settings.registration) return "registration_not_allowed";
  return bindingListed(d.spec, settings) ? null : "binding_not_allowed";
}

/** A registered server's TTL run out at `now`, as `expire` finds it: it drains, and goes a TTL later. */
function lapse(d: DeploymentRecord, now: number): void {
  if (d.state === "active") d.state = "draining";
  d.expiresAt = Math.min(d.expiresAt ?? now, now);
  d.removeAt = now + (d.ttlMs ?? 0);
}

/**
 * A deployment the API or a heartbeat adds or alters whose secrets would cross the internet in
 * cleartext. Not through the fleet's whole check: a deployment stored before the rule would then
 * block every change to the fleet.
 */
function refuseCleartext(spec: DeploymentConfig, field: string): void {
  const why = cleartextSecret(spec);
  if (why) throw new RegistryError(400, "cleartext_secret", `${field} ${why}`, field);
}

/** The spec without the fields `named` (apiKeyEnv, headersFromEnv.<header>); headersFromEnv goes when no header is left. */
function withoutSecrets(spec: DeploymentRecord["spec"], named: readonly { field: string }[]): DeploymentRecord["spec"] {
  const fields = new Set(named.map((n) => n.field));
  const { apiKeyEnv, headersFromEnv, ...rest } = spec;
  const headers = Object.entries(headersFromEnv ?? {}).filter(([h]) => !fields.has(`headersFromEnv.${h}`));
  return { ...rest, ...(apiKeyEnv !== undefined && !fields.has("apiKeyEnv") ? { apiKeyEnv } : {}), ...(headers.length > 0 ? { headersFromEnv: Object.fromEntries(headers) } : {}) };
}

/** A stored group with every setting a later release added at its default (src/fleet/stored-defaults.ts). */
function withStoredDefaults(g: GroupRecord): GroupRecord {
  return { ...g, settings: settingsWithDefaults(g.settings), deployments: g.deployments.map((d) => ({ ...d, spec: specWithDefaults(d.spec) })) };
}

function adminRecord(spec: DeploymentConfig & { id: string }): DeploymentRecord {
  return { spec, state: "active", source: "admin", expiresAt: null, removeAt: null, ttlMs: null };
}

/** What the Worker and the routing object see of a group: its settings, and its deployments with their states. */
function sameRouting(a: GroupRecord, b: GroupRecord): boolean {
  const view = (g: GroupRecord) => JSON.stringify([g.settings, g.deployments.map((d) => [d.spec, d.state])]);
  return view(a) === view(b);
}

/** A group's own row as stored: all of its record but its deployments, which are rows of their own. */
export function ownRow(g: GroupRecord): Omit<GroupRecord, "deployments"> {
  const { deployments: _, ...own } = g;
  return own;
}

function sameRecords(a: GroupRecord, b: GroupRecord): boolean {
  return a.source === b.source && JSON.stringify([a.deployments, a.bindingsFromUpgrade]) === JSON.stringify([b.deployments, b.bindingsFromUpgrade]);
}

/** One deployment's spec alike in two fleets, whatever the order of its keys: a copy shares it, a seed or a fleet apply lists it anew. */
function sameSpec(a: DeploymentRecord["spec"], b: DeploymentRecord["spec"]): boolean {
  return a === b || canonicalJson(a) === canonicalJson(b);
}
