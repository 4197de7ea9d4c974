import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import type { DecisionView } from "../../src/metrics/decisions.ts";
import { partition } from "../../src/sharding/partition.ts";
import { closedPort } from "../support/closed-port.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";
import { ensurePython, runPython } from "./python.ts";

/**
 * GET /metrics as Prometheus meets it: the bundled gateway in workerd on a real socket, the
 * simulated fleet (and a port nobody listens on) as the GPUs, a mixed workload of streamed and
 * non-streamed requests, failovers and virtual keys, and the text parsed by prometheus_client's
 * own parser (test/python/scrape_metrics.py): the families hold what the workload implies.
 */

let fleet: Fleet;
let gw: TestGateway;
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;
const metricsKey = `sk-metrics-${randomBytes(16).toString("hex")}`;
/** Every virtual key made here: none may show up in the metrics. */
const issued: string[] = [];

const sim = (i: number) => ({ id: `sim-${i}`, baseUrl: fleet.urls[i] as string, model: "sim-7b" });

beforeAll(async () => {
  await ensurePython();
  fleet = await startFleet({ workers: 4, basePort: 0, preset: "instant", servedModelName: "sim-7b" });
  const dead = `http://127.0.0.1:${await closedPort()}`;
  gw = await startTestGateway(
    {
      modelGroups: [
        { name: "m", deployments: [sim(0), sim(1)] },
        // Round-robin sends every request to the dead server first until its breaker opens (after 2 failures).
        { name: "m-failover", strategy: "round-robin", breaker: { consecutiveFailures: 2, openMs: 600_000 }, deployments: [{ id: "dead", baseUrl: dead, model: "sim-7b" }, sim(2)] },
        { name: "fast-stream", deployments: [sim(3)] },
        { name: "fast-whole", deployments: [sim(3)] },
      ],
    },
    { KVGATE_ADMIN_KEY: adminKey, KVGATE_METRICS_KEY: metricsKey },
  );
}, 180_000);
afterAll(async () => {
  await gw?.close();
  await fleet?.close();
});

async function admin(method: string, path: string, body?: unknown, key = adminKey): Promise<Response> {
  return fetch(`${gw.url}/admin/v1${path}`, { method, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body: body === undefined ? undefined : JSON.stringify(body) });
}

async function createKey(body: Record<string, unknown>): Promise<{ id: string; key: string }> {
  const res = await admin("POST", "/keys", body);
  expect(res.status).toBe(201);
  const view = (await res.json()) as { id: string; key: string };
  issued.push(view.key);
  return view;
}

const SYSTEM = "You are a careful assistant who answers in one line. ".repeat(12);

/** One chat request, its body read to the end; returns the status and the attempts header. */
async function chat(key: string, model: string, stream: boolean, question: string): Promise<{ status: number; attempts: string | null }> {
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, stream, max_tokens: 6, messages: [{ role: "system", content: SYSTEM }, { role: "user", content: question }] }),
  });
  await res.text();
  return { status: res.status, attempts: res.headers.get("x-kvgate-attempts") };
}

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}
interface Family {
  name: string;
  type: string;
  help: string;
  samples: Sample[];
}
interface Scrape {
  status: number;
  content_type: string | null;
  families: Family[];
}

const scrape = (token: string) => runPython<Scrape>("scrape_metrics.py", [`${gw.url}/metrics`, token]);

/** The sum of the samples named `name` whose labels include `labels`. */
function sum(families: Family[], name: string, labels: Record<string, string> = {}): number {
  let n = 0;
  for (const f of families) for (const s of f.samples) if (s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)) n += s.value;
  return n;
}

/** The raw text, and the sum of every series' TTFT count in it (what the wait below watches). */
async function rawText(): Promise<{ text: string; ttftCount: number }> {
  const res = await fetch(`${gw.url}/metrics`, { headers: { authorization: `Bearer ${metricsKey}` } });
  const text = await res.text();
  let ttftCount = 0;
  for (const m of text.matchAll(/^kvgate_ttft_seconds_count\{[^}]*\} (\S+)$/gm)) ttftCount += Number(m[1]);
  return { text, ttftCount };
}

describe("GET /metrics after a mixed workload", () => {
  const STREAMED = 3;
  const WHOLE = 3;
  const FAILOVER_REQUESTS = 4;
  const KEY_REQUESTS = 4;
  let key: { id: string; key: string };
  let limited: { id: string; key: string };
  let families: Family[];
  let text: string;
  /** Requests the clients got an answer to: every one of them had a first byte. */
  const answered = STREAMED + WHOLE + FAILOVER_REQUESTS + KEY_REQUESTS + 1;

  beforeAll(async () => {
    key = await createKey({ name: "metrics-usage" });
    limited = await createKey({ name: "metrics-limited", rpm: 1 });
    for (let i = 0; i < STREAMED; i++) expect((await chat(gw.key, "m", true, `streamed ${i}`)).status).toBe(200);
    for (let i = 0; i < WHOLE; i++) expect((await chat(gw.key, "m", false, `whole ${i}`)).status).toBe(200);
    const attempts: (string | null)[] = [];
    for (let i = 0; i < FAILOVER_REQUESTS; i++) {
      const r = await chat(gw.key, "m-failover", true, `failover ${i}`);
      expect(r.status).toBe(200);
      attempts.push(r.attempts);
    }
    // The dead server is tried until its breaker opens: two failovers, then none.
    expect(attempts).toEqual(["2", "2", "1", "1"]);
    for (let i = 0; i < KEY_REQUESTS; i++) expect((await chat(key.key, "m", i % 2 === 0, `keyed ${i}`)).status).toBe(200);
    expect((await chat(limited.key, "m", false, "first")).status).toBe(200);
    expect((await chat(limited.key, "m", false, "second")).status).toBe(429);
    // Releases ride along with the next call or a short timer; the figures settle.
    await vi.waitFor(async () => expect((await rawText()).ttftCount).toBe(answered), EVENTUALLY);
    const scraped = await scrape(metricsKey);
    expect(scraped.status).toBe(200);
    expect(scraped.content_type).toBe("text/plain; version=0.0.4; charset=utf-8");
    families = scraped.families;
    text = (await rawText()).text;
  }, 60_000);

  it("parses with Prometheus' own parser, each family once, with its type and help", () => {
    const names = families.map((f) => f.name);
    expect(new Set(names).size).toBe(names.length);
    const typeOf = Object.fromEntries(families.map((f) => [f.name, f.type]));
    // The parser names a counter's family without its _total suffix.
    expect(typeOf).toMatchObject({
      kvgate_requests: "counter",
      kvgate_routing_decisions: "counter",
      kvgate_failovers: "counter",
      kvgate_requests_in_flight: "gauge",
      kvgate_breaker_state: "gauge",
      kvgate_breaker_transitions: "counter",
      kvgate_ttft_seconds: "histogram",
      kvgate_request_duration_seconds: "histogram",
      kvgate_prompt_tokens: "counter",
      kvgate_cached_tokens: "counter",
      kvgate_completion_tokens: "counter",
      kvgate_predicted_cached_tokens: "counter",
      kvgate_prefix_set_entries: "gauge",
      kvgate_prefix_set_bytes: "gauge",
      kvgate_key_requests: "counter",
      kvgate_key_limit_hits: "counter",
    });
    for (const f of families) expect(f.help.length).toBeGreaterThan(10);
  });

  it("counts requests per outcome, failovers, breaker state and transitions as the workload implies", () => {
    const ok = (group: string, backend?: string) => sum(families, "kvgate_requests_total", { group, outcome: "ok", ...(backend ? { backend } : {}) });
    expect(ok("m")).toBe(STREAMED + WHOLE + KEY_REQUESTS + 1);
    expect(sum(families, "kvgate_requests_total", { group: "m" })).toBe(STREAMED + WHOLE + KEY_REQUESTS + 1);
    expect(ok("m-failover", "sim-2")).toBe(FAILOVER_REQUESTS);
    expect(sum(families, "kvgate_requests_total", { group: "m-failover", backend: "dead", outcome: "upstream-error" })).toBe(2);
    expect(sum(families, "kvgate_requests_total", { group: "m-failover", backend: "dead" })).toBe(2);
    expect(sum(families, "kvgate_failovers_total", { group: "m-failover", backend: "sim-2" })).toBe(2);
    expect(sum(families, "kvgate_failovers_total")).toBe(2);
    expect(sum(families, "kvgate_routing_decisions_total", { group: "m-failover", backend: "sim-2", reason: "failover" })).toBe(2);
    expect(sum(families, "kvgate_routing_decisions_total", { group: "m-failover", backend: "sim-2", reason: "round-robin" })).toBe(2);
    expect(sum(families, "kvgate_routing_decisions_total", { group: "m" })).toBe(STREAMED + WHOLE + KEY_REQUESTS + 1);
    expect(sum(families, "kvgate_breaker_state", { group: "m-failover", backend: "dead" })).toBe(2);
    expect(sum(families, "kvgate_breaker_state", { group: "m-failover", backend: "sim-2" })).toBe(0);
    expect(sum(families, "kvgate_breaker_transitions_total", { group: "m-failover", backend: "dead", to: "open" })).toBe(1);
    expect(sum(families, "kvgate_requests_in_flight")).toBe(0);
    expect(sum(families, "kvgate_group_up", { group: "m" })).toBe(1);
    expect(sum(families, "kvgate_route_refusals_total")).toBe(0);
  });

  it("times every answered request: TTFT and duration histograms with cumulative buckets up to +Inf", () => {
    expect(sum(families, "kvgate_ttft_seconds_count")).toBe(answered);
    expect(sum(families, "kvgate_request_duration_seconds_count")).toBe(answered);
    expect(sum(families, "kvgate_ttft_seconds_count", { group: "m-failover", backend: "dead" })).toBe(0);
    const ttft = families.find((f) => f.name === "kvgate_ttft_seconds")?.samples ?? [];
    for (const count of ttft.filter((s) => s.name === "kvgate_ttft_seconds_count")) {
      const { group, backend } = count.labels;
      const buckets = ttft.filter((s) => s.name === "kvgate_ttft_seconds_bucket" && s.labels.group === group && s.labels.backend === backend);
      expect(buckets.at(-1)?.labels.le).toBe("+Inf");
      expect(buckets.at(-1)?.value).toBe(count.value);
      for (let i = 1; i < buckets.length; i++) expect(buckets[i]?.value).toBeGreaterThanOrEqual(buckets[i - 1]?.value ?? 0);
    }
    expect(sum(families, "kvgate_ttft_seconds_sum")).toBeGreaterThan(0);
  });

  it("counts a key's requests, tokens equal to its usage, and its limit hits; never a key string", async () => {
    await vi.waitFor(async () => expect(((await (await admin("GET", `/usage?key=${key.id}`)).json()) as { requests: number }).requests).toBe(KEY_REQUESTS), EVENTUALLY);
    const usage = (await (await admin("GET", `/usage?key=${key.id}`)).json()) as { prompt_tokens: number; completion_tokens: number; cached_tokens: number };
    const of = (name: string) => sum(families, name, { group: "m", key: key.id });
    expect(of("kvgate_key_requests_total")).toBe(KEY_REQUESTS);
    expect({ prompt: of("kvgate_key_prompt_tokens_total"), completion: of("kvgate_key_completion_tokens_total"), cached: of("kvgate_key_cached_tokens_total") }).toEqual({
      prompt: usage.prompt_tokens,
      completion: usage.completion_tokens,
      cached: usage.cached_tokens,
    });
    expect(usage.prompt_tokens).toBeGreaterThan(0);
    expect(sum(families, "kvgate_key_requests_total", { key: limited.id })).toBe(1);
    expect(sum(families, "kvgate_key_limit_hits_total", { key: limited.id, limit: "rpm" })).toBe(1);
    expect(sum(families, "kvgate_key_limit_hits_total", { key: key.id })).toBe(0);
    // The backends' token counters cover exactly the attempts whose usage was read: both keys'.
    expect(sum(families, "kvgate_usage_reads_total", { group: "m" })).toBe(KEY_REQUESTS + 1);
    expect(sum(families, "kvgate_prompt_tokens_total", { group: "m" })).toBe(usage.prompt_tokens + sum(families, "kvgate_key_prompt_tokens_total", { key: limited.id }));
    for (const secret of [...issued, gw.key, adminKey, metricsKey]) expect(text).not.toContain(secret);
    expect(text).not.toContain(SYSTEM.slice(0, 40));
  });

  it("shows the cached tokens routing predicted beside those the fleet reported, and the prefix sets' size", () => {
    // The shared system prompt matched on its backend's prefix set, and the fleet cached it.
    expect(sum(families, "kvgate_predicted_cached_tokens_total", { group: "m" })).toBeGreaterThan(0);
    expect(sum(families, "kvgate_cached_tokens_total", { group: "m" })).toBeGreaterThan(0);
    const entries = sum(families, "kvgate_prefix_set_entries", { group: "m" });
    expect(entries).toBeGreaterThan(0);
    expect(sum(families, "kvgate_prefix_set_bytes", { group: "m" })).toBeGreaterThanOrEqual(entries * 28);
  });

  it("lists the group's routing decisions newest first, with their outcome and TTFT", async () => {
    const res = await admin("GET", "/groups/m-failover/decisions");
    expect(res.status).toBe(200);
    const list = (await res.json()) as { object: string; group: string; data: DecisionView[] };
    expect(list).toMatchObject({ object: "list", group: "m-failover" });
    // Four requests, two of which failed over: six attempts, the latest first.
    expect(list.data.map((d) => [d.backend, d.reason, d.outcome])).toEqual([
      ["sim-2", "round-robin", "ok"],
      ["sim-2", "round-robin", "ok"],
      ["sim-2", "failover", "ok"],
      ["dead", "round-robin", "upstream-error"],
      ["sim-2", "failover", "ok"],
      ["dead", "round-robin", "upstream-error"],
    ]);
    for (const d of list.data) {
      expect(Date.parse(d.at)).toBeGreaterThan(0);
      expect(d.ttft_ms === null).toBe(d.backend === "dead");
      expect(d.matched).toBe(0);
      expect(d.total).toBeGreaterThan(0);
    }
    const times = list.data.map((d) => Date.parse(d.at));
    expect([...times].sort((a, b) => b - a)).toEqual(times);
    expect((await admin("GET", "/groups/nope/decisions")).status).toBe(404);
    expect((await admin("GET", "/groups/m/decisions", undefined, metricsKey)).status).toBe(401);
  });
});

describe("GET /metrics: who may scrape", () => {
  it("takes the admin key and the metrics key; the master key, a virtual key and no key get a 401", async () => {
    const virtual = await createKey({ name: "metrics-refused" });
    expect((await scrape(adminKey)).status).toBe(200);
    expect((await scrape(metricsKey)).status).toBe(200);
    for (const token of [gw.key, virtual.key, "wrong"]) expect((await scrape(token)).status).toBe(401);
    const bare = await fetch(`${gw.url}/metrics`);
    expect(bare.status).toBe(401);
    const error = ((await bare.json()) as { error: { type: string; message: string } }).error;
    expect(error.type).toBe("authentication_error");
    for (const secret of [...issued, gw.key, adminKey, metricsKey]) expect(error.message).not.toContain(secret);
  });
});

describe("TTFT on the fast path", () => {
  it("shows in GET /v1/kvgate/status as a non-null ttftEwmaMs, streamed and not", async () => {
    // The master key: no usage to read, no hook, no deadline — the native pipe and the non-streamed shortcut.
    expect((await chat(gw.key, "fast-stream", true, "stream me")).status).toBe(200);
    expect((await chat(gw.key, "fast-whole", false, "whole")).status).toBe(200);
    await vi.waitFor(async () => {
      for (const group of ["fast-stream", "fast-whole"]) {
        const [b] = (await gw.status(group)).backends;
        expect(b?.completed).toBe(1);
        expect(b?.ttftEwmaMs).not.toBeNull();
        expect(b?.ttftEwmaMs).toBeGreaterThanOrEqual(0);
      }
    }, EVENTUALLY);
  });
});

describe("a deployment that moved to a new address under its id", () => {
  it("keeps counting up when its old address is let go: no counter falls", async () => {
    expect((await admin("POST", "/groups", { name: "moved", deployments: [{ id: "x", baseUrl: fleet.urls[0], model: "sim-7b" }] })).status).toBe(201);
    // A virtual key's requests have their usage read: the token and cache-report counters move too.
    const key = await createKey({ name: "metrics-moved" });
    let served = 0;
    /** One request with the group's current version, once its routing object routes with it. */
    const serve = async () => {
      const res = await fetch(`${gw.url}/admin/v1/status`, { headers: { authorization: `Bearer ${adminKey}` } });
      const { rev } = ((await res.json()) as { groups: { name: string; rev: number }[] }).groups.find((g) => g.name === "moved") as { rev: number };
      await vi.waitFor(async () => {
        expect((await chat(key.key, "moved", true, `moved ${served}`)).status).toBe(200);
        served++;
        const now = ((await (await admin("GET", "/status")).json()) as { groups: { name: string; routingRev: number | null }[] }).groups.find((g) => g.name === "moved");
        expect(now?.routingRev).toBe(rev);
      }, EVENTUALLY);
    };
    const counted = async () => {
      const { families } = await scrape(metricsKey);
      const of = (name: string) => sum(families, name, { group: "moved", backend: "x" });
      return { ok: sum(families, "kvgate_requests_total", { group: "moved", backend: "x", outcome: "ok" }), reads: of("kvgate_usage_reads_total"), reports: of("kvgate_cache_reports_total"), ttft: of("kvgate_ttft_seconds_count") };
    };
    const settled = async () => {
      await vi.waitFor(async () => expect((await counted()).ttft).toBe(served), EVENTUALLY);
      return counted();
    };
    await serve();
    // Its pod restarted at another address.
    expect((await admin("PATCH", "/groups/moved/deployments/x", { baseUrl: fleet.urls[1] })).status).toBe(200);
    await serve();
    expect(await settled()).toEqual({ ok: served, reads: served, reports: served, ttft: served });
    // Newer versions (an operator tuning it) push the one that named the old address out.
    for (const maxInFlight of [11, 12, 13, 14]) {
      expect((await admin("PATCH", "/groups/moved/deployments/x", { maxInFlight })).status).toBe(200);
      await serve();
    }
    expect(await settled()).toEqual({ ok: served, reads: served, reports: served, ttft: served });
  }, 60_000);
});

/** A sample's name and labels (in the order of their names), as countersOf keys it. */
const seriesOf = (name: string, labels: Record<string, string>): string => `${name}${JSON.stringify(Object.fromEntries(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))))}`;

/** Every sample of `group`'s counters and histograms (buckets, counts, sums), by name and labels. */
function countersOf(families: Family[], group: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const f of families) {
    if (f.type !== "counter" && f.type !== "histogram") continue;
    for (const s of f.samples) if (s.labels.group === group) out.set(seriesOf(s.name, s.labels), s.value);
  }
  return out;
}

/** A group of one object's samples under the names its own object's series take once the group has several: shard="0". */
function asOwnShard(counts: Map<string, number>): Map<string, number> {
  return new Map(
    [...counts].map(([series, v]) => {
      const at = series.indexOf("{");
      return [seriesOf(series.slice(0, at), { ...(JSON.parse(series.slice(at)) as Record<string, string>), shard: "0" }), v];
    }),
  );
}

/** The samples that fell from one scrape to the next (a series gone counts as 0): what Prometheus reads as a reset. */
function fallen(before: Map<string, number>, after: Map<string, number>): string[] {
  return [...before].filter(([k, v]) => (after.get(k) ?? 0) < v).map(([k, v]) => `${k}: ${v} -> ${after.get(k) ?? "gone"}`);
}

describe("a group whose shards change", () => {
  const ids = ["sim-0", "sim-1", "sim-2", "sim-3"];
  const deployments = () => ids.map((_, i) => sim(i));
  /** Requests of `group` over distinct prompts (both shards get some), some with a key of rpm 1 (limit hits on both shards too); how many were answered. */
  const workload = async (group: string, key: string, tag: string): Promise<number> => {
    let answered = 0;
    for (let i = 0; i < 8; i++) if ((await chat(gw.key, group, i % 2 === 0, `${tag} ${i}: how deep is the water here?`)).status === 200) answered++;
    for (let i = 0; i < 6; i++) if ((await chat(key, group, false, `${tag} keyed ${i}: and the tide?`)).status === 200) answered++;
    return answered;
  };
  const settled = async (group: string, answered: number) => {
    await vi.waitFor(async () => expect(sum((await scrape(metricsKey)).families, "kvgate_ttft_seconds_count", { group })).toBe(answered), EVENTUALLY);
    return (await scrape(metricsKey)).families;
  };
  /** The fleet each isolate reads for /metrics and the status is at most this old. */
  const fleetRead = () => new Promise((r) => setTimeout(r, 1_100));

  it("keeps the dropped shard's counters and requests in flight when shards are lowered", async () => {
    expect((await admin("POST", "/groups", { name: "shrinks", shards: 2, deployments: deployments() })).status).toBe(201);
    const key = await createKey({ name: "metrics-shrinks", rpm: 1 });
    const answered = await workload("shrinks", key.key, "shrinks");
    // A stream of 20 s (unless cancelled) on a server of the second shard.
    const second = new Set(ids.filter((_, i) => partition(ids, 2)[i] === 1));
    let open: Response | null = null;
    for (let i = 0; i < 16 && !open; i++) {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "shrinks", stream: true, max_tokens: 400, kvgate_sim: { chunk_delay_ms: 50 }, messages: [{ role: "user", content: `seal ${i}: `.padEnd(300, "notes; ") }] }),
      });
      expect(res.status).toBe(200);
      if (second.has(res.headers.get("x-kvgate-backend") ?? "")) open = res;
      else await res.body?.cancel();
    }
    if (!open) throw new Error("no stream went to the second shard");
    const held = open.headers.get("x-kvgate-backend") as string;
    const before = countersOf(await settled("shrinks", answered), "shrinks");
    expect(sum((await scrape(metricsKey)).families, "kvgate_key_limit_hits_total", { group: "shrinks" })).toBeGreaterThan(0);
    expect((await admin("PATCH", "/groups/shrinks", { shards: 1 })).status).toBe(200);
    await fleetRead();
    const after = await scrape(metricsKey);
    expect(fallen(before, countersOf(after.families, "shrinks"))).toEqual([]);
    expect(sum(after.families, "kvgate_requests_in_flight", { group: "shrinks", backend: held })).toBe(1);
    expect((await gw.status("shrinks")).backends.find((b) => b.id === held)?.inFlight).toBe(1);
    await open.body?.cancel();
    await vi.waitFor(async () => expect(await gw.inFlight("shrinks")).toBe(0), EVENTUALLY);
    // Idle, the given-up shard's object hands its counts to the group's own (within 5 s) and is asked no more: still none falls.
    const idle = countersOf((await scrape(metricsKey)).families, "shrinks");
    await new Promise((r) => setTimeout(r, 5_000));
    await fleetRead();
    expect(fallen(idle, countersOf((await scrape(metricsKey)).families, "shrinks"))).toEqual([]);
    // The given-up shard's object keeps its last version for good: a deployment the group then loses goes from both views all the same.
    expect((await admin("DELETE", `/groups/shrinks/deployments/${held}`)).status).toBe(200);
    await fleetRead();
    expect(sum((await scrape(metricsKey)).families, "kvgate_requests_total", { group: "shrinks", backend: held })).toBe(0);
    expect((await gw.status("shrinks")).backends.map((b) => b.id).sort()).toEqual(ids.filter((id) => id !== held));
  }, 60_000);

  it("counts a deployment that moved to a new shard once, and keeps its counts when the shard it left lets it go", async () => {
    expect((await admin("POST", "/groups", { name: "grows", deployments: deployments() })).status).toBe(201);
    const key = await createKey({ name: "metrics-grows", rpm: 1 });
    let answered = await workload("grows", key.key, "grows");
    const before = countersOf(await settled("grows", answered), "grows");
    // Two shards: half the servers move to the new shard's object, and the first still has them in the version it routed with.
    expect((await admin("PATCH", "/groups/grows", { shards: 2 })).status).toBe(200);
    await fleetRead();
    answered += await workload("grows", key.key, "grows again");
    const moved = countersOf(await settled("grows", answered), "grows");
    // Its own object's series are named shard="0" from then on: new series, each going on from what the unnamed one had.
    expect([...moved.keys()].filter((k) => !k.includes('"shard":'))).toEqual([]);
    expect(fallen(asOwnShard(before), moved)).toEqual([]);
    // Newer versions (an operator tuning a server) push that version out of the first shard's object, which then lets the servers that left go.
    for (const maxInFlight of [11, 12, 13, 14]) expect((await admin("PATCH", "/groups/grows/deployments/sim-0", { maxInFlight })).status).toBe(200);
    await fleetRead();
    const { families } = await scrape(metricsKey);
    expect(fallen(moved, countersOf(families, "grows"))).toEqual([]);
    // Each request counted once, by the one object that routed it.
    expect(sum(families, "kvgate_requests_total", { group: "grows" })).toBe(answered);
    expect(sum(families, "kvgate_ttft_seconds_count", { group: "grows" })).toBe(answered);
    // A server the group then loses goes from /metrics, the counts the first shard carried of it too.
    const gone = ids[partition(ids, 2).indexOf(1)] as string;
    expect(sum(families, "kvgate_requests_total", { group: "grows", backend: gone })).toBeGreaterThan(0);
    expect((await admin("DELETE", `/groups/grows/deployments/${gone}`)).status).toBe(200);
    await fleetRead();
    expect(sum((await scrape(metricsKey)).families, "kvgate_requests_total", { group: "grows", backend: gone })).toBe(0);
  }, 60_000);
});
