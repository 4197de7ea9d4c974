import { describe, expect, it } from "vitest";
import { parseConfig, type ConfigSeed } from "../../src/config/load.ts";
import { ModelGroupSchema, type DeploymentConfig, type ModelGroupConfig } from "../../src/config/schema.ts";
import { applyCommand } from "../../src/fleet/apply.ts";
import { filledSeedHash, FleetRegistry, RegistryError, seedHashOf, type DeploymentRecord, type GroupRecord } from "../../src/fleet/registry.ts";

const group = (name: string, ids: string[], extra: Record<string, unknown> = {}): ModelGroupConfig =>
  ModelGroupSchema.parse({ name, deployments: ids.map((id, i) => ({ id, baseUrl: `http://10.0.0.${i + 1}:8000`, model: "m" })), ...extra });

/** A seed whose config spelled out every setting: the groups as written are the groups filled in. */
const asWritten = (groups: ModelGroupConfig[]): ConfigSeed => ({ groups, written: groups });

function seeded(...groups: ModelGroupConfig[]): FleetRegistry {
  const r = new FleetRegistry();
  r.seed(asWritten(groups));
  r.takeWrites();
  return r;
}

const states = (r: FleetRegistry, g: string) => Object.fromEntries((r.resolved(g)?.deployments ?? []).map((d) => [d.id, d.state]));

/** Group "a" (one config deployment) with server gpu-7 registered at 0 s with a 10 s TTL, and the operator's `word` on it at 1 s. */
function gpu7Under(word: "disabled" | "draining") {
  const r = seeded(group("a", ["a1"]));
  const hb = { group: "a", id: "gpu-7", baseUrl: "http://10.0.0.7:8000", model: "m", ttlSeconds: 10 };
  applyCommand(r, { op: "heartbeat", heartbeat: hb }, 0);
  applyCommand(r, { op: "set-state", group: "a", id: "gpu-7", state: word }, 1000);
  return { r, hb };
}

function refused(f: () => unknown): RegistryError {
  try {
    f();
  } catch (e) {
    if (e instanceof RegistryError) return e;
    throw e;
  }
  throw new Error("the command was not refused");
}

describe("FleetRegistry", () => {
  it("takes the config's seed once, and again only when it changes", () => {
    const r = new FleetRegistry();
    expect(r.seed(asWritten([group("a", ["a1", "a2"])]))).toEqual({ changed: ["a"], removed: [], aliasesHeld: [], bindingsKept: [], removals: [] });
    expect(r.rev).toBe(1);
    expect(r.seed(asWritten([group("a", ["a1", "a2"])]))).toBeNull();
    expect(r.rev).toBe(1);
  });

  it("a new seed replaces the config's deployments and keeps those the API and heartbeats added, and an operator's drain", () => {
    const r = seeded(group("a", ["a1", "a2"]));
    applyCommand(r, { op: "add-deployment", group: "a", deployment: { id: "x", baseUrl: "http://10.0.1.1:8000", model: "m" } }, 0);
    applyCommand(r, { op: "set-state", group: "a", id: "a2", state: "draining" }, 0);
    r.seed(asWritten([group("a", ["a2", "a3"])]));
    expect(states(r, "a")).toEqual({ a2: "draining", a3: "active", x: "active" });
  });

  it("a new seed giving a group an alias another group holds takes effect without that alias, which stays where it is, and names it", () => {
    const r = seeded(group("a", ["a1"]), group("gone", ["g1"], { aliases: ["old"] }));
    applyCommand(r, { op: "add-group", group: { name: "ops", aliases: ["chat"], deployments: [{ id: "o1", baseUrl: "http://10.0.9.1:8000", model: "m" }] } }, 0);
    applyCommand(r, { op: "heartbeat", heartbeat: { group: "gone", id: "hb", baseUrl: "http://10.0.2.1:8000", model: "m", ttlSeconds: 30 } }, 0);
    // The next deploy moves a to a2 and gives it the admin-added group's alias, the name of that
    // group, and the alias of a group it drops, which stays for its registered server.
    const taken = r.seed(asWritten([group("a", ["a2"], { aliases: ["chat", "ops", "old", "mine"] })]));
    expect(states(r, "a")).toEqual({ a2: "active" });
    expect(r.resolved("a")?.aliases).toEqual(["mine"]);
    expect(r.resolved("ops")?.aliases).toEqual(["chat"]);
    expect(r.resolved("gone")?.aliases).toEqual(["old"]);
    expect(taken).toEqual({
      changed: ["a", "gone"],
      removed: [],
      aliasesHeld: [
        { group: "a", alias: "chat", holder: "ops" },
        { group: "a", alias: "ops", holder: "ops" },
        { group: "a", alias: "old", holder: "gone" },
      ],
      bindingsKept: [],
      // The config's servers it no longer lists; gone stays for its registered server.
      removals: [
        { group: "a", deployments: ["a1"], groupRemoved: false },
        { group: "gone", deployments: ["g1"], groupRemoved: false },
      ],
    });
  });

  it("a new seed that breaks another rule against the fleet is refused whole, and tried again: its hash is not taken", () => {
    const r = seeded(group("a", ["a1"]));
    applyCommand(r, { op: "add-group", group: { name: "ops", aliases: ["b"], deployments: [] } }, 0);
    // A group's name cannot be left out as an alias can: "b" is the alias of ops. Named by its
    // place in the config (the fleet lists ops before it), a clash with a group the config does not hold.
    const e = refused(() => r.seed(asWritten([group("a", ["a2"]), group("b", ["b1"])])));
    expect([e.status, e.message, e.param]).toEqual([409, 'modelGroups[1].name "b" is already the name or alias of another group', "modelGroups[1].name"]);
    expect(states(r, "a")).toEqual({ a1: "active" });
    applyCommand(r, { op: "remove-group", group: "ops" }, 0);
    expect(r.seed(asWritten([group("a", ["a2"]), group("b", ["b1"])]))).toEqual({ changed: ["a", "b"], removed: [], aliasesHeld: [], bindingsKept: [], removals: [{ group: "a", deployments: ["a1"], groupRemoved: false }] });
  });

  it("a fleet exported and applied again changes nothing: drains and disables hold, a registered server stays registered, its TTL running", () => {
    const r = seeded(group("a", ["a1", "a2", "a3"]));
    applyCommand(r, { op: "heartbeat", heartbeat: { group: "a", id: "hb", baseUrl: "http://10.0.2.1:8000", model: "m", ttlSeconds: 30 } }, 0);
    applyCommand(r, { op: "set-state", group: "a", id: "a2", state: "disabled" }, 0);
    applyCommand(r, { op: "set-state", group: "a", id: "a3", state: "draining" }, 0);
    applyCommand(r, { op: "replace", modelGroups: JSON.parse(JSON.stringify(r.exported())) }, 1000);
    expect(states(r, "a")).toEqual({ a1: "active", a2: "disabled", a3: "draining", hb: "active" });
    // The server renews its registration as before; past its TTL it drains, and a TTL later it goes.
    expect(applyCommand(r, { op: "heartbeat", heartbeat: { group: "a", id: "hb", baseUrl: "http://10.0.2.1:8000", model: "m", ttlSeconds: 30 } }, 10_000)).toEqual({ changed: [], removed: [] });
    r.expire(41_000);
    expect(states(r, "a").hb).toBe("draining");
    r.expire(71_000);
    expect(states(r, "a")).not.toHaveProperty("hb");
    // An operator's drain still holds against its heartbeats; an enable after the apply takes it back.
    applyCommand(r, { op: "set-state", group: "a", id: "a2", state: "active" }, 72_000);
    expect(states(r, "a")).toEqual({ a1: "active", a2: "active", a3: "draining" });
  });

  it("a fleet applied with a registered server's address changed takes the server over as the operator's: its heartbeats are then refused", () => {
    const r = seeded(group("a", ["a1"]));
    applyCommand(r, { op: "heartbeat", heartbeat: { group: "a", id: "hb", baseUrl: "http://10.0.2.1:8000", model: "m", ttlSeconds: 30 } }, 0);
    const moved = r.exported().map((g) => ({ ...g, deployments: g.deployments.map((d) => (d.id === "hb" ? { ...d, baseUrl: "http://10.0.2.9:8000" } : d)) }));
    applyCommand(r, { op: "replace", modelGroups: moved }, 1000);
    expect(refused(() => applyCommand(r, { op: "heartbeat", heartbeat: { group: "a", id: "hb", baseUrl: "http://10.0.2.1:8000", model: "m", ttlSeconds: 30 } }, 2000)).status).toBe(409);
    r.expire(1_000_000);
    expect(states(r, "a")).toEqual({ a1: "active", hb: "active" });
  });

  it("a change gets the next revision and names the groups whose routing changed; an unchanged one keeps its revision", () => {
    const r = seeded(group("a", ["a1"]), group("b", ["b1"]));
    const change = applyCommand(r, { op: "set-state", group: "a", id: "a1", state: "draining" }, 0);
    expect(change).toEqual({ changed: ["a"], removed: [] });
    expect(r.resolved("a")?.rev).toBe(2);
    expect(r.resolved("b")?.rev).toBe(1);
    // The same state again changes nothing.
    expect(applyCommand(r, { op: "set-state", group: "a", id: "a1", state: "draining" }, 0)).toEqual({ changed: [], removed: [] });
    expect(r.rev).toBe(2);
  });

  it("a version is the group's content: drained and enabled again, it is the version it was, at a later revision", () => {
    const r = seeded(group("a", ["a1", "a2"]));
    const before = r.resolved("a");
    applyCommand(r, { op: "set-state", group: "a", id: "a1", state: "draining" }, 0);
    expect(r.resolved("a")?.version).not.toBe(before?.version);
    applyCommand(r, { op: "set-state", group: "a", id: "a1", state: "active" }, 0);
    expect(r.resolved("a")?.version).toBe(before?.version);
    expect(r.resolved("a")?.rev).toBe(3);
  });

  it.each([
    ["an unknown group", { op: "add-deployment", group: "zz", deployment: { id: "x", baseUrl: "http://h:1", model: "m" } }, 404, "group_not_found"],
    ["an id used already", { op: "add-deployment", group: "a", deployment: { id: "a1", baseUrl: "http://h:1", model: "m" } }, 409, "deployment_exists"],
    ["a deployment without an id", { op: "add-deployment", group: "a", deployment: { baseUrl: "http://h:1", model: "m" } }, 400, "invalid_value"],
    ["a URL with credentials", { op: "add-deployment", group: "a", deployment: { id: "x", baseUrl: "http://u:p@h:1", model: "m" } }, 400, "invalid_value"],
    ["a URL with credentials after a third slash", { op: "update-deployment", group: "a", id: "a1", patch: { baseUrl: "https:///u:p@h:1" } }, 400, "invalid_value"],
    ["an unknown field", { op: "update-deployment", group: "a", id: "a1", patch: { maxInflight: 3 } }, 400, "invalid_value"],
    ["an empty update", { op: "update-deployment", group: "a", id: "a1", patch: {} }, 400, "invalid_value"],
    ["an unknown state", { op: "set-state", group: "a", id: "a1", state: "paused" }, 400, "invalid_value"],
    ["an alias another group has", { op: "update-group", group: "b", patch: { aliases: ["a"] } }, 409, "invalid_fleet"],
    ["a group others fall back to", { op: "remove-group", group: "b" }, 400, "invalid_fleet"],
    ["a heartbeat for a deployment the API added", { op: "heartbeat", heartbeat: { group: "a", id: "a1", baseUrl: "http://h:1", model: "m" } }, 409, "deployment_exists"],
    ["a heartbeat TTL of 0", { op: "heartbeat", heartbeat: { group: "a", id: "h", baseUrl: "http://h:1", model: "m", ttlSeconds: 0 } }, 400, "invalid_value"],
    ["a deployment naming the gateway's admin key", { op: "add-deployment", group: "a", deployment: { id: "k", baseUrl: "http://h:1", model: "m", apiKeyEnv: "KVGATE_ADMIN_KEY" } }, 400, "gateway_key_named"],
    ["an update naming the master key in a header", { op: "update-deployment", group: "a", id: "x", patch: { headersFromEnv: { "x-k": "KVGATE_MASTER_KEY" } } }, 400, "gateway_key_named"],
    ["a fleet naming the register key", { op: "replace", modelGroups: [{ name: "a", deployments: [{ id: "k", baseUrl: "http://h:1", model: "m", apiKeyEnv: "KVGATE_REGISTER_KEY" }] }] }, 400, "gateway_key_named"],
    ["a heartbeat naming the metrics key", { op: "heartbeat", heartbeat: { group: "a", id: "h", baseUrl: "http://h:1", model: "m", apiKeyEnv: "KVGATE_METRICS_KEY" } }, 400, "gateway_key_named"],
    ["a heartbeat naming a secret not listed for heartbeats", { op: "heartbeat", heartbeat: { group: "a", id: "h", baseUrl: "http://h:1", model: "m", headersFromEnv: { "x-t": "VLLM_KEY" } } }, 403, "secret_not_allowed"],
  ] as const)("refuses %s, and changes nothing", (_what, cmd, status, code) => {
    const r = seeded(group("a", ["a1"], { fallbacks: ["b"] }), group("b", ["b1"]));
    applyCommand(r, { op: "add-deployment", group: "a", deployment: { id: "x", baseUrl: "http://10.0.1.1:8000", model: "m" } }, 0);
    r.takeWrites();
    const before = JSON.stringify(r.snapshot());
    const rev = r.rev;
    const e = refused(() => applyCommand(r, cmd, 0));
    expect([e.status, e.code]).toEqual([status, code]);
    expect(JSON.stringify(r.snapshot())).toBe(before);
    expect(r.rev).toBe(rev);
    expect(r.takeWrites().put).toEqual([]);
  });

  it("hands its store the rows a change made: a renewal one deployment's, a registration or a drain the group's own row too", () => {
    const r = seeded(group("a", ["a1", "a2"]), group("b", ["b1"]));
    const rows = () => Object.fromEntries([...r.takeWrites().rows].map(([n, w]) => [n, { own: w.own, deployments: [...w.deployments], renewed: [...w.renewed] }]));
    const hb = { group: "a", id: "gpu-7", baseUrl: "http://10.0.0.7:8000", model: "m", ttlSeconds: 10 };
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 0);
    expect(rows()).toEqual({ a: { own: true, deployments: ["gpu-7"], renewed: [] } });
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 5_000);
    expect(rows()).toEqual({ a: { own: false, deployments: ["gpu-7"], renewed: ["gpu-7"] } });
    // A new TTL is no renewal: the group's row of the release before is to have it.
    applyCommand(r, { op: "heartbeat", heartbeat: { ...hb, ttlSeconds: 30 } }, 5_500);
    expect(rows()).toEqual({ a: { own: false, deployments: ["gpu-7"], renewed: [] } });
    applyCommand(r, { op: "set-state", group: "a", id: "a2", state: "draining" }, 6_000);
    expect(rows()).toEqual({ a: { own: true, deployments: ["a2"], renewed: [] } });
    // A removal: the group's own row (its revision); the store finds the row gone.
    applyCommand(r, { op: "remove-deployment", group: "a", id: "a1" }, 7_000);
    expect(rows()).toEqual({ a: { own: true, deployments: [], renewed: [] } });
    applyCommand(r, { op: "update-group", group: "b", patch: { hotThreshold: 3 } }, 8_000);
    expect(rows()).toEqual({ b: { own: true, deployments: [], renewed: [] } });
    expect(rows()).toEqual({});
  });

  it("takes back writes its store failed to make, so the next write makes them, a renewal still one", () => {
    const r = seeded(group("a", ["a1", "a2"]), group("b", ["b1"]), group("c", ["c1"]));
    const hb = { group: "b", id: "gpu-7", baseUrl: "http://10.0.0.7:8000", model: "m", ttlSeconds: 10 };
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 0);
    r.takeWrites();
    applyCommand(r, { op: "set-state", group: "a", id: "a2", state: "draining" }, 1_000);
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 2_000);
    applyCommand(r, { op: "remove-group", group: "c" }, 3_000);
    const failed = r.takeWrites();
    r.requeue(failed);
    // Then another change to the group (a server registering): the drain's rows are written with it.
    applyCommand(r, { op: "heartbeat", heartbeat: { ...hb, group: "a", id: "gpu-8" } }, 4_000);
    const next = r.takeWrites();
    expect(next.deleted).toEqual(["c"]);
    expect(next.rows.get("a")?.own).toBe(true);
    expect([...(next.rows.get("a")?.deployments ?? [])]).toEqual(["a2", "gpu-8"]);
    expect(next.rows.get("b")).toEqual({ own: false, deployments: new Set(["gpu-7"]), renewed: new Set(["gpu-7"]) });
  });

  it("an update changes only the fields it names", () => {
    const r = seeded(group("a", ["a1"]));
    applyCommand(r, { op: "update-deployment", group: "a", id: "a1", patch: { maxInFlight: 4 } }, 0);
    applyCommand(r, { op: "update-deployment", group: "a", id: "a1", patch: { weight: 2 } }, 0);
    const d = r.resolved("a")?.deployments[0];
    expect([d?.maxInFlight, d?.weight]).toEqual([4, 2]);
  });

  it("a registered server stays while its heartbeats come; past its TTL it drains, a TTL later it goes", () => {
    const r = seeded(group("a", ["a1"]));
    const hb = { group: "a", id: "gpu-7", baseUrl: "http://10.0.0.7:8000", model: "m", ttlSeconds: 10 };
    expect(applyCommand(r, { op: "heartbeat", heartbeat: hb }, 0).changed).toEqual(["a"]);
    const rev = r.rev;
    // Renewals that change nothing routing sees make no revision.
    expect(applyCommand(r, { op: "heartbeat", heartbeat: hb }, 5_000).changed).toEqual([]);
    expect(r.rev).toBe(rev);
    expect(r.takeWrites().put.map((g) => g.settings.name)).toEqual(["a"]);
    expect(r.nextWake()).toBe(15_000);
    expect(r.expire(14_999).changed).toEqual([]);
    expect(r.expire(15_000).changed).toEqual(["a"]);
    expect(states(r, "a")).toEqual({ a1: "active", "gpu-7": "draining" });
    expect(r.nextWake()).toBe(25_000);
    // Back before it goes: active again.
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 20_000);
    expect(states(r, "a")).toEqual({ a1: "active", "gpu-7": "active" });
    r.expire(30_000);
    expect(r.expire(40_000).changed).toEqual(["a"]);
    expect(states(r, "a")).toEqual({ a1: "active" });
    expect(r.nextWake()).toBeNull();
  });

  it("an operator's disable outlasts a server's heartbeats", () => {
    const r = seeded(group("a", ["a1"]));
    const hb = { group: "a", id: "gpu-7", baseUrl: "http://10.0.0.7:8000", model: "m" };
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 0);
    applyCommand(r, { op: "set-state", group: "a", id: "gpu-7", state: "disabled" }, 0);
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 1000);
    expect(states(r, "a")["gpu-7"]).toBe("disabled");
  });

  // A server's heartbeats stopping for two TTLs (a restart, a /health failing a minute) took the operator's disable with its record: back, it was active.
  it("an operator's disable outlasts a pause in a server's heartbeats: its record stays, lapsed, until an enable or a removal", () => {
    const { r, hb } = gpu7Under("disabled");
    r.expire(10_000);
    r.expire(20_000);
    expect(states(r, "a")["gpu-7"]).toBe("disabled");
    // Its lapse stays to be seen (the expiry that ran out), and no alarm is due for it.
    expect(r.group("a")?.deployments.find((d) => d.spec.id === "gpu-7")).toMatchObject({ expiresAt: 10_000, removeAt: null });
    expect(r.nextWake()).toBeNull();
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 25_000);
    expect(states(r, "a")["gpu-7"]).toBe("disabled");
    // Renewed, then lapsed again: still held.
    r.expire(40_000);
    r.expire(60_000);
    expect(states(r, "a")["gpu-7"]).toBe("disabled");
    // An enable ends it: from then on the server lapses and goes as any.
    applyCommand(r, { op: "set-state", group: "a", id: "gpu-7", state: "active" }, 61_000);
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 62_000);
    r.expire(72_000);
    r.expire(82_000);
    expect(states(r, "a")).toEqual({ a1: "active" });
  });

  // Held as a disable was, every drained-then-stopped server (a rollout: drain --wait, delete the pod, a new $HOSTNAME) stayed for ever, until its group's 1,024 rows refused new servers.
  it("an operator's drain lasts while the server's heartbeats come: two TTLs without them, its row goes, and a new server registers", () => {
    const { r, hb } = gpu7Under("draining");
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 5000);
    expect(r.nextWake()).toBe(15_000);
    r.expire(15_000);
    expect(r.group("a")?.deployments.find((d) => d.spec.id === "gpu-7")).toMatchObject({ state: "draining", expiresAt: 15_000, removeAt: 25_000 });
    expect(r.nextWake()).toBe(25_000);
    r.expire(25_000);
    expect(states(r, "a")).toEqual({ a1: "active" });
    expect(r.nextWake()).toBeNull();
  });

  it("servers drained and stopped do not fill their group: the 1,025th server's heartbeat registers it", () => {
    const r = seeded(group("a", ["a1"]));
    const hb = (id: string) => ({ group: "a", id, baseUrl: "http://10.0.0.7:8000", model: "m", ttlSeconds: 10 });
    for (let i = 0; i < 1024; i++) {
      const at = i * 100_000;
      applyCommand(r, { op: "heartbeat", heartbeat: hb(`gpu-${i}`) }, at);
      applyCommand(r, { op: "set-state", group: "a", id: `gpu-${i}`, state: "draining" }, at + 1000);
      r.expire(at + 10_000);
      r.expire(at + 20_000);
    }
    applyCommand(r, { op: "heartbeat", heartbeat: hb("new") }, 1024 * 100_000);
    expect(states(r, "a")).toEqual({ a1: "active", new: "active" });
  });

  // An enable of a server whose TTL ran out long ago left it active with no TTL: a dead address taking requests for good.
  it("an enable of a disabled server whose TTL ran out gives it one TTL: without a heartbeat it lapses and goes, with one it renews", () => {
    const { r, hb } = gpu7Under("disabled");
    r.expire(10_000);
    r.expire(20_000);
    r.expire(3_600_000);
    applyCommand(r, { op: "set-state", group: "a", id: "gpu-7", state: "active" }, 3_600_000);
    expect(r.group("a")?.deployments.find((d) => d.spec.id === "gpu-7")).toMatchObject({ state: "active", expiresAt: 3_610_000, removeAt: null });
    expect(r.nextWake()).toBe(3_610_000);
    // One that comes back renews as usual.
    const back = new FleetRegistry();
    const w = r.takeWrites();
    back.load(w.rev, w.seedHash, JSON.parse(JSON.stringify(w.put)) as GroupRecord[], 3_600_000);
    applyCommand(back, { op: "heartbeat", heartbeat: hb }, 3_605_000);
    back.expire(3_612_000);
    expect(states(back, "a")["gpu-7"]).toBe("active");
    // One that never does: drained at its TTL, gone a TTL later.
    r.expire(3_610_000);
    expect(states(r, "a")["gpu-7"]).toBe("draining");
    r.expire(3_620_000);
    expect(states(r, "a")).toEqual({ a1: "active" });
  });

  it("a disable of a server whose TTL ran out already holds past the removal its lapse set", () => {
    const r = seeded(group("a", ["a1"]));
    const hb = { group: "a", id: "gpu-7", baseUrl: "http://10.0.0.7:8000", model: "m", ttlSeconds: 10 };
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 0);
    r.expire(10_000);
    applyCommand(r, { op: "set-state", group: "a", id: "gpu-7", state: "disabled" }, 11_000);
    r.expire(20_000);
    r.expire(30_000);
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 31_000);
    expect(states(r, "a")["gpu-7"]).toBe("disabled");
  });

  it("an operator's drain outlasts a server's heartbeats, and only an enable ends it", () => {
    const r = seeded(group("a", ["a1"]));
    const hb = { group: "a", id: "gpu-7", baseUrl: "http://10.0.0.7:8000", model: "m", ttlSeconds: 10 };
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 0);
    applyCommand(r, { op: "set-state", group: "a", id: "gpu-7", state: "draining" }, 1000);
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 2000);
    expect(states(r, "a")["gpu-7"]).toBe("draining");
    // Lapsed while drained and back: still the operator's drain.
    r.expire(12_000);
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 13_000);
    expect(states(r, "a")["gpu-7"]).toBe("draining");
    applyCommand(r, { op: "set-state", group: "a", id: "gpu-7", state: "active" }, 14_000);
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 15_000);
    expect(states(r, "a")["gpu-7"]).toBe("active");
  });

  it("an operator's drain of a server its lapsed TTL drained already holds when it comes back", () => {
    const r = seeded(group("a", ["a1"]));
    const hb = { group: "a", id: "gpu-7", baseUrl: "http://10.0.0.7:8000", model: "m", ttlSeconds: 10 };
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 0);
    r.expire(10_000);
    applyCommand(r, { op: "set-state", group: "a", id: "gpu-7", state: "draining" }, 11_000);
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 12_000);
    expect(states(r, "a")["gpu-7"]).toBe("draining");
  });

  it("a record stored before the operator's word was kept: a lapsed server comes back active, a disabled one stays disabled", () => {
    const r = seeded(group("a", ["a1"]));
    const hb = (id: string) => ({ group: "a", id, baseUrl: `http://10.0.0.${id.length}:8000`, model: "m", ttlSeconds: 10 });
    applyCommand(r, { op: "heartbeat", heartbeat: hb("lapsed") }, 0);
    applyCommand(r, { op: "heartbeat", heartbeat: hb("off") }, 0);
    r.expire(10_000);
    const w = r.takeWrites();
    // As such a record was written: the state alone, a disable by the operator, a drain by expire().
    const old = (JSON.parse(JSON.stringify(w.put)) as GroupRecord[]).map((g) => ({
      ...g,
      deployments: g.deployments.map(({ operatorState: _, ...d }) => (d.spec.id === "off" ? { ...d, state: "disabled" as const } : d)),
    }));
    const again = new FleetRegistry();
    again.load(w.rev, w.seedHash, old, 0);
    expect(states(again, "a")).toEqual({ a1: "active", lapsed: "draining", off: "disabled" });
    applyCommand(again, { op: "heartbeat", heartbeat: hb("lapsed") }, 11_000);
    applyCommand(again, { op: "heartbeat", heartbeat: hb("off") }, 11_000);
    expect(states(again, "a")).toEqual({ a1: "active", lapsed: "active", off: "disabled" });
  });

  it("a server registered through a binding its group no longer lists is routed nothing at the next load, and renews only once listed again", () => {
    const r = seeded(group("a", ["a1"], { registrationBindings: ["GPU_VPC"] }));
    const hb = { group: "a", id: "gpu-9", baseUrl: "http://10.0.0.9:8000", model: "m", ttlSeconds: 10, binding: "GPU_VPC" };
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 0);
    expect(states(r, "a")).toEqual({ a1: "active", "gpu-9": "active" });
    // The same records, stored with a group that lists no binding (the list taken away), by a registry that kept lists.
    const w = r.takeWrites();
    const stored = (JSON.parse(JSON.stringify(w.put)) as GroupRecord[]).map((g) => ({ ...g, settings: { ...g.settings, registrationBindings: undefined } }));
    const later = new FleetRegistry();
    // The load names the server it leaves out: the deploy that brings the list says what it dropped.
    expect(later.load(w.rev, w.seedHash, stored, 1000).unrouted).toEqual([{ reason: "binding_not_allowed", group: "a", deployment: "gpu-9", binding: "GPU_VPC" }]);
    expect(states(later, "a")).toEqual({ a1: "active" });
    expect(refused(() => applyCommand(later, { op: "heartbeat", heartbeat: hb }, 2000))).toMatchObject({ status: 403, code: "binding_not_allowed", param: "binding" });
    applyCommand(later, { op: "update-group", group: "a", patch: { registrationBindings: ["GPU_VPC"] } }, 3000);
    expect(states(later, "a")).toEqual({ a1: "active", "gpu-9": "active" });
    applyCommand(later, { op: "heartbeat", heartbeat: hb }, 4000);
  });

  it("a group with registration: false refuses every heartbeat into it, before anything else the heartbeat says is looked at: its servers are the operator's alone", () => {
    const r = seeded(group("cheap", ["c1"]), group("confidential", ["s1"], { registration: false, registrationBindings: ["GPU_VPC"] }));
    const evil = { group: "confidential", id: "evil", baseUrl: "https://attacker.example.net", model: "m", weight: 1000, maxInFlight: 100000, ttlSeconds: 3600 };
    const closed = { status: 403, code: "registration_not_allowed", param: "group" };
    expect(refused(() => applyCommand(r, { op: "heartbeat", heartbeat: evil }, 0))).toMatchObject(closed);
    // Not told whether the id is the operator's, the binding listed or the secret allowed.
    for (const beat of [{ ...evil, id: "s1" }, { ...evil, binding: "OTHER_VPC" }, { ...evil, apiKeyEnv: "KVGATE_ADMIN_KEY" }]) {
      expect(refused(() => applyCommand(r, { op: "heartbeat", heartbeat: beat }, 0))).toMatchObject(closed);
    }
    expect(r.resolved("confidential")?.deployments.map((d) => d.id)).toEqual(["s1"]);
    // The operator still adds servers to it; another group still takes heartbeats.
    applyCommand(r, { op: "add-deployment", group: "confidential", deployment: { id: "s2", baseUrl: "https://s2.example.com", model: "m" } }, 0);
    applyCommand(r, { op: "heartbeat", heartbeat: { ...evil, group: "cheap" } }, 0);
    expect(states(r, "confidential")).toEqual({ s1: "active", s2: "active" });
    expect(states(r, "cheap")).toEqual({ c1: "active", evil: "active" });
  });

  it("a server registered into a group then closed to registration is routed nothing, renews no more, and lapses and goes; one the operator disabled stays", () => {
    const r = seeded(group("a", ["a1"]));
    const hb = (id: string) => ({ group: "a", id, baseUrl: "http://10.0.0.9:8000", model: "m", ttlSeconds: 10 });
    applyCommand(r, { op: "heartbeat", heartbeat: hb("gpu-8") }, 0);
    applyCommand(r, { op: "heartbeat", heartbeat: hb("gpu-9") }, 0);
    applyCommand(r, { op: "set-state", group: "a", id: "gpu-9", state: "disabled" }, 0);
    applyCommand(r, { op: "update-group", group: "a", patch: { registration: false } }, 1000);
    expect(states(r, "a")).toEqual({ a1: "active" });
    expect(r.unrouted()).toEqual([
      { reason: "registration_not_allowed", group: "a", deployment: "gpu-8" },
      { reason: "registration_not_allowed", group: "a", deployment: "gpu-9" },
    ]);
    expect(refused(() => applyCommand(r, { op: "heartbeat", heartbeat: hb("gpu-8") }, 2000))).toMatchObject({ status: 403, code: "registration_not_allowed" });
    // Its TTL runs out (10 s): it drains, and goes a TTL later; the disabled one is kept.
    r.expire(10_000);
    r.expire(20_000);
    expect(r.group("a")?.deployments.map((d) => [d.spec.id, d.state])).toEqual([
      ["a1", "active"],
      ["gpu-9", "disabled"],
    ]);
    // Opened again, servers register as before, and the disabled one is the operator's to enable.
    applyCommand(r, { op: "update-group", group: "a", patch: { registration: true } }, 21_000);
    applyCommand(r, { op: "heartbeat", heartbeat: hb("gpu-8") }, 22_000);
    expect(states(r, "a")).toEqual({ a1: "active", "gpu-8": "active", "gpu-9": "disabled" });
  });

  it("a fleet stored before registrationBindings was kept keeps its self-registered servers at the upgrade: their bindings are listed in their groups, and the rule holds from then on", () => {
    const r = seeded(group("cfg", ["c1"], { registrationBindings: ["GPU_VPC"] }), group("plain", ["p1"]));
    applyCommand(r, { op: "add-group", group: group("api", ["a1"], { registrationBindings: ["GPU_VPC", "EDGE_VPC"] }) }, 0);
    const hb = (g: string, id: string, binding?: string) => ({ group: g, id, baseUrl: "http://10.0.0.9:8000", model: "m", ttlSeconds: 10, ...(binding ? { binding } : {}) });
    for (const beat of [hb("api", "gpu-1", "GPU_VPC"), hb("api", "gpu-2", "EDGE_VPC"), hb("api", "gpu-3", "GPU_VPC"), hb("cfg", "gpu-9", "GPU_VPC"), hb("plain", "pub")]) applyCommand(r, { op: "heartbeat", heartbeat: beat }, 0);
    // As a registry of before the rule stored them: no group lists a binding.
    const stored = r.names().map((n) => JSON.parse(JSON.stringify(r.group(n))) as GroupRecord).map((g) => ({ ...g, settings: { ...g.settings, registrationBindings: undefined } }));
    const upgraded = new FleetRegistry();
    const loaded = upgraded.load(r.rev, r.seedHash, JSON.parse(JSON.stringify(stored)) as GroupRecord[], 1000, { beforeBindingRule: true });
    expect(states(upgraded, "api")).toEqual({ a1: "active", "gpu-1": "active", "gpu-2": "active", "gpu-3": "active" });
    expect(states(upgraded, "cfg")).toEqual({ c1: "active", "gpu-9": "active" });
    expect(loaded.unrouted).toEqual([]);
    expect(loaded.bindingsKept).toEqual([
      { group: "cfg", bindings: ["GPU_VPC"], deployments: ["gpu-9"] },
      { group: "api", bindings: ["GPU_VPC", "EDGE_VPC"], deployments: ["gpu-1", "gpu-2", "gpu-3"] },
    ]);
    // A new revision of each, stored and pushed like any change; a group whose servers named no binding lists none still.
    expect(loaded.change).toEqual({ changed: ["cfg", "api"], removed: [] });
    expect(upgraded.takeWrites().put.map((g) => [g.settings.name, g.settings.registrationBindings])).toEqual([["cfg", ["GPU_VPC"]], ["api", ["GPU_VPC", "EDGE_VPC"]]]);
    expect(upgraded.group("plain")?.settings.registrationBindings).toBeUndefined();
    // Their renewals are taken; the rule holds from then on: a binding the group does not list is refused.
    applyCommand(upgraded, { op: "heartbeat", heartbeat: hb("api", "gpu-1", "GPU_VPC") }, 2000);
    expect(refused(() => applyCommand(upgraded, { op: "heartbeat", heartbeat: hb("api", "gpu-4", "OTHER_VPC") }, 2000))).toMatchObject({ status: 403, code: "binding_not_allowed" });
    expect(refused(() => applyCommand(upgraded, { op: "heartbeat", heartbeat: hb("plain", "gpu-5", "GPU_VPC") }, 2000))).toMatchObject({ status: 403, code: "binding_not_allowed" });
    // The list is the group's like any setting: a PATCH that takes a binding off leaves its server out.
    applyCommand(upgraded, { op: "update-group", group: "api", patch: { registrationBindings: ["GPU_VPC"] } }, 3000);
    expect(states(upgraded, "api")).toEqual({ a1: "active", "gpu-1": "active", "gpu-3": "active" });

    // The next deploy's seed gives the config's group no list: the upgrade's stays, and is named.
    const taken = upgraded.seed(asWritten([group("cfg", ["c2"]), group("plain", ["p1"])]));
    expect(taken?.bindingsKept).toEqual([{ group: "cfg", bindings: ["GPU_VPC"] }]);
    expect(states(upgraded, "cfg")).toEqual({ c2: "active", "gpu-9": "active" });
    // A later load is no upgrade: what the fleet lists then is what holds.
    const names = upgraded.names();
    const again = new FleetRegistry();
    again.load(upgraded.rev, upgraded.seedHash, names.map((n) => JSON.parse(JSON.stringify(upgraded.group(n))) as GroupRecord), 4000);
    expect(states(again, "cfg")).toEqual({ c2: "active", "gpu-9": "active" });
    // Once the config gives a list, [] included, it is the config's: the upgrade's is not brought back when a later deploy gives none.
    expect(again.seed(asWritten([group("cfg", ["c2"], { registrationBindings: [] }), group("plain", ["p1"])]))?.bindingsKept).toEqual([]);
    expect(states(again, "cfg")).toEqual({ c2: "active" });
    expect(again.seed(asWritten([group("cfg", ["c3"]), group("plain", ["p1"])]))?.bindingsKept).toEqual([]);
    expect(states(again, "cfg")).toEqual({ c3: "active" });
    expect(again.group("cfg")?.settings.registrationBindings).toBeUndefined();
  });

  it("the upgrade's bindings are kept by a seed only until the group is given another list", () => {
    const r = seeded(group("cfg", ["c1"], { registrationBindings: ["GPU_VPC"] }));
    applyCommand(r, { op: "heartbeat", heartbeat: { group: "cfg", id: "gpu-9", baseUrl: "http://10.0.0.9:8000", model: "m", ttlSeconds: 10, binding: "GPU_VPC" } }, 0);
    const stored = [{ ...(JSON.parse(JSON.stringify(r.group("cfg"))) as GroupRecord), settings: { ...(r.group("cfg") as GroupRecord).settings, registrationBindings: undefined } }];
    const upgraded = new FleetRegistry();
    upgraded.load(r.rev, r.seedHash, JSON.parse(JSON.stringify(stored)) as GroupRecord[], 1000, { beforeBindingRule: true });
    // The operator takes the binding off with a PATCH; the next deploy, whose config gives no list, does not bring it back.
    applyCommand(upgraded, { op: "update-group", group: "cfg", patch: { registrationBindings: [] } }, 2000);
    expect(upgraded.seed(asWritten([group("cfg", ["c2"])]))?.bindingsKept).toEqual([]);
    expect(states(upgraded, "cfg")).toEqual({ c2: "active" });
  });

  it("a refused secret is named by its field in the request", () => {
    const r = seeded(group("a", ["a1"]));
    const add = refused(() => applyCommand(r, { op: "add-deployment", group: "a", deployment: { id: "k", baseUrl: "http://h:1", model: "m", apiKeyEnv: "KVGATE_ADMIN_KEY" } }, 0));
    expect([add.param, add.message]).toEqual(["apiKeyEnv", expect.stringMatching(/^apiKeyEnv names KVGATE_ADMIN_KEY, the gateway's own key \(auth\.adminKeyEnv\)/)]);
    const patch = refused(() => applyCommand(r, { op: "update-deployment", group: "a", id: "a1", patch: { headersFromEnv: { "x-k": "KVGATE_MASTER_KEY" } } }, 0));
    expect(patch.param).toBe("headersFromEnv.x-k");
    const fleet = refused(() => applyCommand(r, { op: "replace", modelGroups: [group("b", []), { name: "a", deployments: [{ id: "k", baseUrl: "http://h:1", model: "m", apiKeyEnv: "KVGATE_ADMIN_KEY" }] }] }, 0));
    expect(fleet.param).toBe("modelGroups[1].deployments[0].apiKeyEnv");
    const beat = refused(() => applyCommand(r, { op: "heartbeat", heartbeat: { group: "a", id: "h", baseUrl: "http://h:1", model: "m", apiKeyEnv: "VLLM_KEY" } }, 0));
    expect([beat.param, beat.message]).toEqual(["apiKeyEnv", expect.stringContaining("auth.registrationSecrets")]);
  });

  it("a heartbeat may name the secrets the config lists for heartbeats; a server whose secret is no longer listed stops renewing", () => {
    const auth = { masterKeyEnv: "K_MASTER", adminKeyEnv: "K_ADMIN", registerKeyEnv: "K_REGISTER", metricsKeyEnv: "K_METRICS", registrationSecrets: ["VLLM_KEY"] };
    const r = new FleetRegistry({ auth });
    r.seed(asWritten([group("a", ["a1"])]));
    const hb = { group: "a", id: "gpu-7", baseUrl: "http://10.0.0.7:8000", model: "m", ttlSeconds: 10, apiKeyEnv: "VLLM_KEY" };
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 0);
    expect(r.resolved("a")?.deployments.find((d) => d.id === "gpu-7")?.apiKeyEnv).toBe("VLLM_KEY");
    // The gateway's keys are the config's names, never listed.
    expect(refused(() => applyCommand(r, { op: "heartbeat", heartbeat: { ...hb, apiKeyEnv: "K_ADMIN" } }, 1000)).code).toBe("gateway_key_named");
    expect(refused(() => applyCommand(r, { op: "heartbeat", heartbeat: { ...hb, apiKeyEnv: "KVGATE_ADMIN_KEY" } }, 1000)).code).toBe("secret_not_allowed");

    applyCommand(r, { op: "add-deployment", group: "a", deployment: { id: "ops", baseUrl: "http://10.0.0.8:8000", model: "m", apiKeyEnv: "VLLM_KEY" } }, 0);
    const w = r.takeWrites();
    // The operator takes the secret off the list and deploys: the registry loads its stored fleet at 2 s, 8 s before the server's TTL runs out.
    const unlisted = new FleetRegistry({ auth: { ...auth, registrationSecrets: [] } });
    const loaded = unlisted.load(w.rev, w.seedHash, JSON.parse(JSON.stringify(w.put)) as GroupRecord[], 2000);
    expect(loaded).toEqual({ change: { changed: ["a"], removed: [] }, disarmed: [{ group: "a", deployment: "gpu-7", fields: ["apiKeyEnv"], secrets: ["VLLM_KEY"], code: "secret_not_allowed", action: "lapsed" }], unrouted: [], bindingsKept: [] });
    // Its registration lapsed then, not at its TTL: it is sent the secret no more, drains, and goes a TTL later.
    expect(unlisted.resolved("a")?.deployments.find((d) => d.id === "gpu-7")).toMatchObject({ state: "draining", apiKeyEnv: undefined });
    expect(unlisted.nextWake()).toBe(12_000);
    expect(refused(() => applyCommand(unlisted, { op: "heartbeat", heartbeat: hb }, 5000)).status).toBe(403);
    expect(unlisted.expire(12_000)).toEqual({ changed: ["a"], removed: [] });
    expect(states(unlisted, "a")["gpu-7"]).toBeUndefined();
    // Its server, told, registers again without the secret.
    const { apiKeyEnv: _, ...plain } = hb;
    applyCommand(unlisted, { op: "heartbeat", heartbeat: plain }, 13_000);
    expect(states(unlisted, "a")["gpu-7"]).toBe("active");
    // A deployment the operator added with the secret is the operator's to decide: it loads as it was.
    expect(unlisted.resolved("a")?.deployments.find((d) => d.id === "ops")).toMatchObject({ state: "active", apiKeyEnv: "VLLM_KEY" });
  });

  // Its secret taken off the list, a server the operator disabled showed a removeAt no alarm would honour (expire() holds it), and the README said it goes.
  it("a server the operator disabled whose secret is taken off the list loses the fields that name it and stays disabled, with no removal shown", () => {
    const auth = { masterKeyEnv: "K_MASTER", adminKeyEnv: "K_ADMIN", registerKeyEnv: "K_REGISTER", metricsKeyEnv: "K_METRICS", registrationSecrets: ["VLLM_KEY"] };
    const r = new FleetRegistry({ auth });
    r.seed(asWritten([group("a", ["a1"])]));
    const hb = { group: "a", id: "gpu-7", baseUrl: "http://10.0.0.7:8000", model: "m", ttlSeconds: 10, apiKeyEnv: "VLLM_KEY" };
    applyCommand(r, { op: "heartbeat", heartbeat: hb }, 0);
    applyCommand(r, { op: "set-state", group: "a", id: "gpu-7", state: "disabled" }, 1000);
    const w = r.takeWrites();
    const unlisted = new FleetRegistry({ auth: { ...auth, registrationSecrets: [] } });
    const loaded = unlisted.load(w.rev, w.seedHash, JSON.parse(JSON.stringify(w.put)) as GroupRecord[], 2000);
    expect(loaded.disarmed).toEqual([{ group: "a", deployment: "gpu-7", fields: ["apiKeyEnv"], secrets: ["VLLM_KEY"], code: "secret_not_allowed", action: "kept" }]);
    expect(unlisted.group("a")?.deployments.find((d) => d.spec.id === "gpu-7")).toMatchObject({ state: "disabled", expiresAt: 10_000, removeAt: null });
    expect(unlisted.resolved("a")?.deployments.find((d) => d.id === "gpu-7")?.apiKeyEnv).toBeUndefined();
    expect(unlisted.nextWake()).toBeNull();
    unlisted.expire(3_600_000);
    expect(states(unlisted, "a")["gpu-7"]).toBe("disabled");
  });

  // Disabled at load for naming a gateway key after its lapse had set a removal, a server showed a removeAt no alarm would honour (expire() keeps a disabled row).
  it("a lapsed server disabled at load for naming a gateway key shows no removal: it is kept, as any disabled one", () => {
    const auth = { masterKeyEnv: "K_MASTER", adminKeyEnv: "K_ADMIN", registerKeyEnv: "K_REGISTER", metricsKeyEnv: "K_METRICS", registrationSecrets: ["VLLM_KEY"] };
    const r = new FleetRegistry({ auth });
    r.seed(asWritten([group("a", ["a1"])]));
    applyCommand(r, { op: "heartbeat", heartbeat: { group: "a", id: "gpu-7", baseUrl: "http://10.0.0.7:8000", model: "m", ttlSeconds: 10, apiKeyEnv: "VLLM_KEY" } }, 0);
    r.expire(10_000);
    expect(r.group("a")?.deployments.find((d) => d.spec.id === "gpu-7")).toMatchObject({ state: "draining", removeAt: 20_000 });
    const w = r.takeWrites();
    // The admin key's env renamed to the secret the server names.
    const renamed = new FleetRegistry({ auth: { ...auth, adminKeyEnv: "VLLM_KEY" } });
    const loaded = renamed.load(w.rev, w.seedHash, JSON.parse(JSON.stringify(w.put)) as GroupRecord[], 12_000);
    expect(loaded.disarmed).toMatchObject([{ deployment: "gpu-7", code: "gateway_key_named", action: "disabled" }]);
    expect(renamed.group("a")?.deployments.find((d) => d.spec.id === "gpu-7")).toMatchObject({ state: "disabled", removeAt: null });
    renamed.expire(3_600_000);
    expect(states(renamed, "a")["gpu-7"]).toBe("disabled");
  });

  // A drain of a disabled server long lapsed left its passed expiry: the next alarms removed it at once, and \`drain --wait\` met a 404.
  it("a drain of a server whose TTL ran out gives it one TTL, as an enable does: it drains, and goes two TTLs later without heartbeats", () => {
    const { r } = gpu7Under("disabled");
    r.expire(3_600_000);
    applyCommand(r, { op: "set-state", group: "a", id: "gpu-7", state: "draining" }, 3_600_000);
    expect(r.group("a")?.deployments.find((d) => d.spec.id === "gpu-7")).toMatchObject({ state: "draining", expiresAt: 3_610_000, removeAt: null });
    r.expire(3_600_001);
    r.expire(3_605_000);
    expect(states(r, "a")["gpu-7"]).toBe("draining");
    r.expire(3_610_000);
    r.expire(3_620_000);
    expect(states(r, "a")).toEqual({ a1: "active" });
  });

  it("a deployment stored before the gateway's keys were refused that names one is disabled at load, without the fields that name them", () => {
    const r = seeded(group("a", ["a1"]), group("b", ["b1"]));
    const w = { rev: r.rev, seedHash: r.seedHash, put: JSON.stringify([r.group("a"), r.group("b")]) };
    // As a heartbeat with the register key could store them before the fix, and an operator's slip through the admin API.
    const stored = JSON.parse(w.put) as GroupRecord[];
    const spec = (id: string, over: Partial<DeploymentConfig>) => ({ ...(group("x", [id]).deployments[0] as DeploymentConfig), id, ...over });
    const evil = spec("evil", { baseUrl: "http://10.6.6.6:8000", apiKeyEnv: "KVGATE_ADMIN_KEY", headersFromEnv: { "x-a": "KVGATE_MASTER_KEY", "x-t": "GPU_TOKEN" } });
    stored[0]?.deployments.push({ spec: evil, state: "active", source: "heartbeat", expiresAt: 30_000, removeAt: null, ttlMs: 30_000 });
    stored[1]?.deployments.push({ spec: spec("slip", { apiKeyEnv: "KVGATE_METRICS_KEY" }), state: "active", source: "admin", expiresAt: null, removeAt: null, ttlMs: null });
    const again = new FleetRegistry();
    const loaded = again.load(w.rev, w.seedHash, stored, 0);

    const d = (g: string, id: string) => again.resolved(g)?.deployments.find((x) => x.id === id);
    expect(d("a", "evil")).toMatchObject({ state: "disabled", apiKeyEnv: undefined });
    expect(d("a", "evil")?.headersFromEnv).toEqual({ "x-t": "GPU_TOKEN" });
    expect(d("b", "slip")).toMatchObject({ state: "disabled", apiKeyEnv: undefined });
    expect(d("a", "a1")?.state).toBe("active");
    expect(loaded).toEqual({
      change: { changed: ["a", "b"], removed: [] },
      disarmed: [
        { group: "a", deployment: "evil", fields: ["apiKeyEnv", "headersFromEnv.x-a"], secrets: ["KVGATE_ADMIN_KEY", "KVGATE_MASTER_KEY"], code: "gateway_key_named", action: "disabled" },
        { group: "b", deployment: "slip", fields: ["apiKeyEnv"], secrets: ["KVGATE_METRICS_KEY"], code: "gateway_key_named", action: "disabled" },
      ],
      unrouted: [],
      bindingsKept: [],
    });
    // A new revision, stored, so that routing follows it like any change.
    expect(again.rev).toBe(w.rev + 1);
    expect(again.resolved("a")?.rev).toBe(w.rev + 1);
    expect(again.takeWrites().put.map((g) => g.settings.name)).toEqual(["a", "b"]);
    // The fleet holds again: a change that checks it whole is no longer refused for the stored one.
    expect(applyCommand(again, { op: "add-deployment", group: "a", deployment: { id: "x", baseUrl: "http://10.0.1.1:8000", model: "m" } }, 0)).toEqual({ changed: ["a"], removed: [] });
    // The disable is the operator's: the server's heartbeats do not undo it; one naming the key again is refused.
    applyCommand(again, { op: "heartbeat", heartbeat: { group: "a", id: "evil", baseUrl: "http://10.6.6.6:8000", model: "m", ttlSeconds: 30 } }, 1000);
    expect(d("a", "evil")?.state).toBe("disabled");
    const beat = { group: "a", id: "evil", baseUrl: evil.baseUrl, model: "m", apiKeyEnv: "KVGATE_ADMIN_KEY", ttlSeconds: 30 };
    expect(refused(() => applyCommand(again, { op: "heartbeat", heartbeat: beat }, 2000)).code).toBe("gateway_key_named");
    // A fleet stored clean loads as it was.
    const clean = new FleetRegistry();
    expect(clean.load(w.rev, w.seedHash, JSON.parse(w.put) as GroupRecord[], 0)).toEqual({ change: { changed: [], removed: [] }, disarmed: [], unrouted: [], bindingsKept: [] });
    expect(clean.rev).toBe(w.rev);
  });

  it("replacing the fleet checks it whole", () => {
    const r = seeded(group("a", ["a1"]));
    const e = refused(() => applyCommand(r, { op: "replace", modelGroups: [group("x", ["1"]), group("y", ["1"], { aliases: ["x"] })] }, 0));
    // The clash is the request's own (it holds the whole fleet): a bad body, not a conflict.
    expect([e.status, e.param]).toEqual([400, "modelGroups[1].aliases[0]"]);
    expect(r.names()).toEqual(["a"]);
    expect(applyCommand(r, { op: "replace", modelGroups: [group("x", ["1"])] }, 0)).toEqual({ changed: ["x"], removed: ["a"] });
    expect(r.takeWrites().deleted).toEqual(["a"]);
  });

  it("refuses a change for a deployment it adds or alters that the runtime cannot reach, never for one it leaves alone", () => {
    // The runtime has the secret GPU_KEY and nothing else.
    const reachable = (d: DeploymentConfig) => Object.values(d.headersFromEnv ?? {}).flatMap((name) => (name === "GPU_KEY" ? [] : [{ field: "headersFromEnv", message: `names ${name}, which is not set` }]));
    const stored = seeded(group("a", ["a1"], { strategy: "round-robin" }));
    applyCommand(stored, { op: "add-deployment", group: "a", deployment: { id: "keyed", baseUrl: "http://10.0.1.1:8000", model: "m", headersFromEnv: { "x-k": "GPU_KEY" } } }, 0);
    applyCommand(stored, { op: "heartbeat", heartbeat: { group: "a", id: "hb", baseUrl: "http://10.0.2.1:8000", model: "m", ttlSeconds: 10 } }, 0);
    const w = stored.takeWrites();
    // A deploy took the secret away: the registry loads a deployment that names one the runtime lacks.
    const records = (JSON.parse(JSON.stringify(w.put)) as GroupRecord[]).map((g) => ({ ...g, deployments: g.deployments.map((d) => (d.spec.id === "keyed" ? { ...d, spec: { ...d.spec, headersFromEnv: { "x-k": "GONE_KEY" } } } : d)) }));
    const r = new FleetRegistry({ reachable });
    r.load(w.rev, w.seedHash, records, 0);
    applyCommand(r, { op: "set-state", group: "a", id: "a1", state: "draining" }, 1000);
    applyCommand(r, { op: "heartbeat", heartbeat: { group: "a", id: "hb2", baseUrl: "http://10.0.2.2:8000", model: "m", ttlSeconds: 60 } }, 1000);
    applyCommand(r, { op: "replace", modelGroups: JSON.parse(JSON.stringify(r.exported())) }, 1000);
    r.expire(11_000);
    expect(states(r, "a")).toEqual({ a1: "draining", keyed: "active", hb: "draining", hb2: "active" });
    const e = refused(() => applyCommand(r, { op: "update-deployment", group: "a", id: "keyed", patch: { weight: 2 } }, 12_000));
    // Named by the field of the request.
    expect([e.message, e.param]).toEqual(["headersFromEnv names GONE_KEY, which is not set", "headersFromEnv"]);
    applyCommand(r, { op: "update-deployment", group: "a", id: "keyed", patch: { headersFromEnv: { "x-k": "GPU_KEY" } } }, 12_000);
  });

  it("renews a registered server whose spec is unchanged though the runtime lost its secret, or its plain http predates the rule", () => {
    const auth = { masterKeyEnv: "K_MASTER", adminKeyEnv: "K_ADMIN", registerKeyEnv: "K_REGISTER", metricsKeyEnv: "K_METRICS", registrationSecrets: ["GPU_KEY"] };
    const stored = new FleetRegistry({ auth });
    applyCommand(stored, { op: "add-group", group: group("a", ["a1"]) }, 0);
    const lost = { group: "a", id: "lost", baseUrl: "http://10.0.3.1:8000", model: "m", headersFromEnv: { "x-k": "GPU_KEY" }, ttlSeconds: 10 };
    applyCommand(stored, { op: "heartbeat", heartbeat: lost }, 0);
    const w = stored.takeWrites();
    // Stored before the cleartext rule: a public host over plain http, naming a secret.
    const old = { group: "a", id: "old", baseUrl: "http://gpu.example.com:8000", model: "m", apiKeyEnv: "GPU_KEY", ttlSeconds: 10 };
    const records = (JSON.parse(JSON.stringify(w.put)) as GroupRecord[]).map((g) => {
      const like = g.deployments.find((d) => d.spec.id === "lost") as DeploymentRecord;
      const { headersFromEnv: _h, ...spec } = like.spec;
      return { ...g, deployments: [...g.deployments, { ...like, spec: { ...spec, id: old.id, baseUrl: old.baseUrl, apiKeyEnv: old.apiKeyEnv } }] };
    });
    // A deploy took GPU_KEY away.
    const r = new FleetRegistry({ auth, reachable: (d) => (d.headersFromEnv || d.apiKeyEnv ? [{ field: "headersFromEnv", message: "names GPU_KEY, which is not set" }] : []) });
    r.load(w.rev, w.seedHash, records, 0);
    // Their renewals are not changes: they renew, as before (what they lack answers their requests 500, as before).
    applyCommand(r, { op: "heartbeat", heartbeat: lost }, 5_000);
    applyCommand(r, { op: "heartbeat", heartbeat: old }, 5_000);
    r.expire(12_000);
    expect(states(r, "a")).toMatchObject({ lost: "active", old: "active" });
    // A registration that changes the spec is checked as any change is.
    expect(refused(() => applyCommand(r, { op: "heartbeat", heartbeat: { ...lost, weight: 2 } }, 13_000)).param).toBe("headersFromEnv");
  });

  it("a group stored over the size bound before it was one stops no other change, and may shrink, not grow", () => {
    const long = (i: number) => ({ id: `long-${i}`, baseUrl: `http://10.0.0.${i}:8000/${"p".repeat(200 * 1024)}`, model: "m" });
    const stored = new FleetRegistry();
    stored.seed(asWritten([group("small", ["s1"]), group("big", ["b1"])]));
    // Stored before the bound: 1.6 MB, written straight into the records as a registry of then held it.
    const w = stored.takeWrites();
    const records = (JSON.parse(JSON.stringify(w.put)) as GroupRecord[]).map((g) => (g.settings.name !== "big" ? g : { ...g, deployments: [...g.deployments, ...Array.from({ length: 8 }, (_, i) => ({ ...(g.deployments[0] as DeploymentRecord), spec: { ...(g.deployments[0] as DeploymentRecord).spec, ...long(i) } }))] }));
    const r = new FleetRegistry();
    r.load(w.rev, w.seedHash, records, 0);
    applyCommand(r, { op: "set-state", group: "small", id: "s1", state: "draining" }, 0);
    applyCommand(r, { op: "add-deployment", group: "small", deployment: { id: "s2", baseUrl: "http://10.0.1.2:8000", model: "m" } }, 0);
    applyCommand(r, { op: "remove-deployment", group: "big", id: "long-0" }, 0);
    expect(refused(() => applyCommand(r, { op: "add-deployment", group: "big", deployment: long(9) }, 0)).code).toBe("group_too_large");
  });

  it("persists and restores what routing needs", () => {
    const r = seeded(group("a", ["a1"]));
    applyCommand(r, { op: "heartbeat", heartbeat: { group: "a", id: "h", baseUrl: "http://10.0.0.9:8000", model: "m" } }, 0);
    const w = r.takeWrites();
    const again = new FleetRegistry();
    again.load(w.rev, w.seedHash, JSON.parse(JSON.stringify(w.put)), 0);
    expect(again.snapshot()).toEqual(r.snapshot());
    expect(again.nextWake()).toBe(r.nextWake());
  });
});

/** The seed of a config's text, as the registry's Durable Object takes it. */
function seedOf(text: string): ConfigSeed {
  const parsed = parseConfig(text);
  if (!parsed.ok || parsed.config.seed === null) throw new Error(parsed.ok ? "no modelGroups" : parsed.error);
  return parsed.config.seed;
}

/** The stored records, as JSON gives them back. */
const stored = (r: FleetRegistry): GroupRecord[] => JSON.parse(JSON.stringify(r.names().map((n) => r.group(n)))) as GroupRecord[];

const CONFIG = `{
  // One group, its defaults left out, as an operator writes it.
  "modelGroups": [{ "name": "a", "deployments": [
    { "id": "a1", "baseUrl": "http://10.0.0.1:8000", "model": "m" },
    { "id": "a2", "baseUrl": "http://10.0.0.2:8000", "model": "m" }
  ] }]
}`;

describe("FleetRegistry's seed across releases", () => {
  it("a release whose defaults fill in more (a setting added, a default changed) takes no seed again: the operator's changes to the config's groups hold", () => {
    const seed = seedOf(CONFIG);
    const r = new FleetRegistry();
    r.seed(seed);
    applyCommand(r, { op: "remove-deployment", group: "a", id: "a2" }, 0);
    applyCommand(r, { op: "update-group", group: "a", patch: { hotThreshold: 5 } }, 0);
    const rev = r.rev;
    // The next release: the same text, its groups filled in with one more setting.
    const next = { ...seed, groups: seed.groups.map((g) => ({ ...g, newSetting: 7 })) };
    expect(r.seed(next)).toBeNull();
    expect(r.rev).toBe(rev);
    expect(r.group("a")?.deployments.map((d) => d.spec.id)).toEqual(["a1"]);
    expect(r.group("a")?.settings.hotThreshold).toBe(5);
    // Nor does the order the text gives the keys in; other groups are taken.
    expect(r.seed(seedOf(CONFIG.replace('"id": "a1", "baseUrl": "http://10.0.0.1:8000"', '"baseUrl": "http://10.0.0.1:8000", "id": "a1"')))).toBeNull();
    expect(r.seed(seedOf(CONFIG.replace("10.0.0.2", "10.0.0.3")))?.changed).toEqual(["a"]);
    expect(r.group("a")?.deployments.map((d) => d.spec.id)).toEqual(["a1", "a2"]);
  });

  it("the first start of the release that hashes the config as written takes the seed a registry of before took as taken, and stores its new hash", () => {
    const seed = seedOf(CONFIG);
    const before = new FleetRegistry();
    before.seed(seed);
    applyCommand(before, { op: "remove-deployment", group: "a", id: "a2" }, 0);
    // As the registry of before stored it: the hash of the groups filled in.
    const r = new FleetRegistry();
    r.load(before.rev, filledSeedHash(seed.groups), stored(before), 0);
    expect(r.seed(seed)).toBeNull();
    expect(r.group("a")?.deployments.map((d) => d.spec.id)).toEqual(["a1"]);
    expect(r.takeWrites().seedHash).toBe(seedHashOf(seed.written));
    // A registry of before that took other groups: this deploy brings other ones, and they are taken.
    const other = new FleetRegistry();
    other.load(before.rev, filledSeedHash(seedOf(CONFIG.replace("10.0.0.2", "10.0.0.3")).groups), stored(before), 0);
    expect(other.seed(seed)?.changed).toEqual(["a"]);
    expect(other.group("a")?.deployments.map((d) => d.spec.id)).toEqual(["a1", "a2"]);
  });

  it("a seed that takes deployments out names each, by group, and the groups that went", () => {
    const r = seeded(group("a", ["a1", "a2"]), group("b", ["b1"]), group("c", []));
    applyCommand(r, { op: "add-deployment", group: "a", deployment: { id: "ops", baseUrl: "http://10.0.1.1:8000", model: "m" } }, 0);
    const taken = r.seed(asWritten([group("a", ["a2"])]));
    expect(taken?.removals).toEqual([
      { group: "a", deployments: ["a1"], groupRemoved: false },
      { group: "b", deployments: ["b1"], groupRemoved: true },
      { group: "c", deployments: [], groupRemoved: true },
    ]);
    expect(r.seed(asWritten([group("a", ["a2"])]))).toBeNull();
    expect(r.seed(asWritten([group("a", ["a2", "a3"])]))?.removals).toEqual([]);
  });

  it("a seed that no longer lists a group the admin API made takes out the config's servers there, names them, and leaves the group with what the API added", () => {
    const r = new FleetRegistry();
    applyCommand(r, { op: "add-group", group: { name: "a", deployments: [] } }, 0);
    applyCommand(r, { op: "add-group", group: { name: "b", deployments: [{ id: "ops", baseUrl: "http://10.0.1.1:8000", model: "m" }] } }, 0);
    // A later config lists both groups, with servers of its own.
    r.seed(asWritten([group("a", ["a1"]), group("b", ["b1", "b2"])]));
    expect([states(r, "a"), states(r, "b")]).toEqual([{ a1: "active" }, { b1: "active", b2: "active", ops: "active" }]);
    // And the next one lists neither: the config's servers go, the groups stay the admin API's.
    const taken = r.seed(asWritten([]));
    expect([states(r, "a"), states(r, "b")]).toEqual([{}, { ops: "active" }]);
    expect(r.names()).toEqual(["a", "b"]);
    expect(taken?.removals).toEqual([
      { group: "a", deployments: ["a1"], groupRemoved: false },
      { group: "b", deployments: ["b1", "b2"], groupRemoved: false },
    ]);
    expect(taken?.changed).toEqual(["a", "b"]);
  });

  it("a stored record without a setting a later release added loads with its default, and is pushed as a change", () => {
    const r = seeded(group("a", ["a1"]), group("b", ["b1"]));
    const records = stored(r).map((g) => {
      if (g.settings.name !== "a") return g;
      const { streamKeepAliveMs: _, registration: _r, failover, ...settings } = g.settings;
      const { backoffMaxMs: _b, ...olderFailover } = failover;
      return { ...g, settings: { ...settings, failover: olderFailover } as GroupRecord["settings"], deployments: g.deployments.map(({ spec: { weight: _w, ...spec }, ...d }) => ({ ...d, spec: spec as DeploymentRecord["spec"] })) };
    });
    const again = new FleetRegistry();
    const { change } = again.load(r.rev, r.seedHash, records, 0);
    expect(change).toEqual({ changed: ["a"], removed: [] });
    expect(again.rev).toBe(r.rev + 1);
    expect(again.group("a")?.settings).toEqual(r.group("a")?.settings);
    expect(again.resolved("a")?.deployments[0]?.weight).toBe(1);
    expect(again.takeWrites().put.map((g) => g.settings.name)).toEqual(["a"]);
  });

  it("a group stored with leaseTtlMs below the floor (taken before afaee18) reads as the floor: stored and pushed so, and every change to it, or the fleet exported and applied again, is taken", () => {
    const r = seeded(group("a", ["a1"]), group("b", ["b1"]));
    const records = stored(r).map((g) => (g.settings.name !== "a" ? g : { ...g, settings: { ...g.settings, leaseTtlMs: 200 } }));
    const again = new FleetRegistry();
    expect(again.load(r.rev, r.seedHash, records, 0).change).toEqual({ changed: ["a"], removed: [] });
    expect(again.group("a")?.settings.leaseTtlMs).toBe(300);
    expect(again.takeWrites().put.map((g) => [g.settings.name, g.settings.leaseTtlMs])).toEqual([["a", 300]]);
    // A change of another field, then the fleet as exported, applied unchanged.
    applyCommand(again, { op: "update-group", group: "a", patch: { fallbacks: ["b"] } }, 0);
    expect(again.group("a")?.settings).toMatchObject({ fallbacks: ["b"], leaseTtlMs: 300 });
    applyCommand(again, { op: "replace", modelGroups: JSON.parse(JSON.stringify(again.exported())) }, 0);
    // Set below it anew, it is refused as any config is.
    expect(refused(() => applyCommand(again, { op: "update-group", group: "a", patch: { leaseTtlMs: 200 } }, 0)).param).toBe("leaseTtlMs");
  });

  it("a stored record the schema now refuses (a rule came later) still gets the defaults of the settings it lacks, and keeps its values", () => {
    const r = seeded(group("a", ["a1"]));
    const records = stored(r).map(({ settings: { streamKeepAliveMs: _, ...settings }, ...g }) => ({
      ...g,
      // A name refused since (2ecf68f), and an address ending in /v1 (717f7e3).
      settings: { ...settings, name: "." } as GroupRecord["settings"],
      deployments: g.deployments.map(({ spec: { weight: _w, ...spec }, ...d }) => ({ ...d, spec: { ...spec, baseUrl: "http://10.0.0.1:8000/v1" } as DeploymentRecord["spec"] })),
    }));
    const again = new FleetRegistry();
    again.load(r.rev, r.seedHash, records, 0);
    expect(again.group(".")?.settings).toMatchObject({ name: ".", streamKeepAliveMs: 500 });
    expect(again.group(".")?.deployments[0]?.spec).toMatchObject({ id: "a1", baseUrl: "http://10.0.0.1:8000/v1", weight: 1 });
  });
});
