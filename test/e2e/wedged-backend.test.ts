import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * A wedged backend: it takes the connection, its health endpoint says ok, and it never answers a
 * completion — a hung vLLM or llama.cpp engine behind a live HTTP server. A stream's first-token
 * timeout is a verdict on it; a non-streamed answer's timeout alone is not (the generation may be
 * long because the request asked for it), so without more evidence such a backend would take its
 * share of the non-streamed traffic for ever, each request waiting out nonStreamTimeoutMs.
 */

let upstream: HostileUpstream;
let fleet: Fleet;
let gw: TestGateway;

const TIMEOUT_MS = 400;
const CONSECUTIVE = 3;
const CLIENTS = 3;
// No probe during a test: what a probe does with a breaker that opened is health-probes.test.ts's.
const breaker = { consecutiveFailures: CONSECUTIVE, openMs: 600_000, probeIntervalMs: 600_000 };
const sim = (i: number) => ({ id: `sim-${i}`, baseUrl: fleet.urls[i] as string, model: "sim-7b" });
const wedged = () => ({ id: "wedged", baseUrl: `${upstream.url}/wedged`, model: "sim-7b" });
const group = (name: string, deployments: { id: string; baseUrl: string; model: string }[], extra: Record<string, unknown> = {}) => ({
  name,
  strategy: "round-robin" as const,
  nonStreamTimeoutMs: TIMEOUT_MS,
  firstByteTimeoutMs: TIMEOUT_MS,
  breaker,
  deployments,
  ...extra,
});

beforeAll(async () => {
  upstream = await startHostileUpstream();
  fleet = await startFleet({ workers: 2, basePort: 0, preset: "instant", servedModelName: "sim-7b" });
  gw = await startTestGateway({
    modelGroups: [
      group("wedged-whole", [wedged(), sim(0), sim(1)]),
      group("wedged-streamed", [wedged(), sim(0), sim(1)]),
      group("wedged-mixed", [wedged(), sim(0), sim(1)]),
      // Probed often, as by default: its health endpoint says ok all along. No cool-down ends in a test.
      group("wedged-probed", [wedged(), sim(0), sim(1)], { breaker: { ...breaker, probeIntervalMs: 40 } }),
      group("wedged-probed-streamed", [wedged(), sim(0), sim(1)], { breaker: { ...breaker, probeIntervalMs: 40 } }),
      // A shard each: the wedged backend's shard holds no other backend that serves.
      group("wedged-sharded", [wedged(), sim(0), sim(1)], { shards: 3 }),
      // Usage read for every request: a whole answer is read in one go, under the timeout.
      group("stalled-whole", [{ id: "stalled", baseUrl: `${upstream.url}/stalled-body`, model: "sim-7b" }, sim(0), sim(1)], { feedback: { sampleRate: 1 } }),
      group("long-answer", [sim(0), sim(1)], { breaker: { ...breaker, consecutiveFailures: 1 } }),
      // Leases renewed every 100 ms: a stream under way tells its first token within the test.
      group("hung-mid-stream", [{ id: "hung", baseUrl: `${upstream.url}/hung-engine`, model: "sim-7b" }, sim(0), sim(1)], { leaseTtlMs: 300 }),
    ],
  });
});
afterAll(async () => {
  await gw?.close();
  await fleet?.close();
  await upstream?.close();
});

interface Answered {
  status: number;
  backend: string | null;
  attempts: string | null;
  code: string | null;
}

async function chat(model: string, stream: boolean, extra: Record<string, unknown> = {}): Promise<Answered> {
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: `hello ${Math.random()}` }], max_tokens: 4, stream, ...extra }),
  });
  const text = await res.text();
  const code = res.status === 200 ? null : ((JSON.parse(text) as { error?: { code?: string } }).error?.code ?? null);
  return { status: res.status, backend: res.headers.get("x-kvgate-backend"), attempts: res.headers.get("x-kvgate-attempts"), code };
}

/** `CLIENTS` clients, each sending `each` requests one after another; `stream(i)` says whether request i of a client streams. */
async function traffic(model: string, each: number, stream: (i: number) => boolean): Promise<Answered[]> {
  const clients = Array.from({ length: CLIENTS }, async () => {
    const out: Answered[] = [];
    for (let i = 0; i < each; i++) out.push(await chat(model, stream(i)));
    return out;
  });
  return (await Promise.all(clients)).flat();
}

const breakerOf = async (model: string, id: string) => (await gw.status(model)).backends.find((b) => b.id === id)?.breaker.state;

describe("a wedged backend among answering ones", () => {
  it("non-streamed traffic only: its silent timeouts open its breaker, and the rest of the traffic goes to the others", async () => {
    upstream.reset();
    const answers = await traffic("wedged-whole", 15, () => false);
    const onWedged = answers.filter((a) => a.backend === "wedged");
    // Each request it got waited out the timeout: a 504, not retried (it would redo a whole generation).
    for (const a of onWedged) expect([a.status, a.code, a.attempts]).toEqual([504, "upstream_timeout", "1"]);
    for (const a of answers.filter((x) => x.backend !== "wedged")) expect(a.status).toBe(200);
    // Its breaker opened after CONSECUTIVE of them; the other clients' requests already there when
    // it did are all it got besides: not its third of the 45.
    expect(upstream.stats("wedged").requests).toBeLessThanOrEqual(CONSECUTIVE + CLIENTS - 1);
    expect(await breakerOf("wedged-whole", "wedged")).toBe("open");
    await vi.waitFor(async () => expect(await gw.inFlight("wedged-whole")).toBe(0), EVENTUALLY);
    await vi.waitFor(() => expect(upstream.stats("wedged").open).toBe(0), EVENTUALLY);
  });

  it("streamed traffic only: every request fails over before its first byte, and the breaker opens", async () => {
    upstream.reset();
    const answers = await traffic("wedged-streamed", 15, () => true);
    for (const a of answers) expect([a.status, a.backend === "wedged"]).toEqual([200, false]);
    expect(answers.filter((a) => a.attempts === "2").length).toBe(upstream.stats("wedged").requests);
    expect(upstream.stats("wedged").requests).toBeLessThanOrEqual(CONSECUTIVE + CLIENTS - 1);
    expect(await breakerOf("wedged-streamed", "wedged")).toBe("open");
  });

  it("a mix: streamed and non-streamed silences count alike, and the breaker opens", async () => {
    upstream.reset();
    const answers = await traffic("wedged-mixed", 16, (i) => i % 2 === 0);
    for (const a of answers.filter((x) => x.backend === "wedged")) expect([a.status, a.code]).toEqual([504, "upstream_timeout"]);
    for (const a of answers.filter((x) => x.backend !== "wedged")) expect(a.status).toBe(200);
    expect(upstream.stats("wedged").requests).toBeLessThanOrEqual(CONSECUTIVE + CLIENTS - 1);
    expect(await breakerOf("wedged-mixed", "wedged")).toBe("open");
  });
});

describe("a wedged backend whose health endpoint says ok, probed as by default", () => {
  it("non-streamed: a good health probe neither half-opens nor closes the breaker its silence opened, so it gets no more of the traffic", async () => {
    upstream.reset();
    const answers = await traffic("wedged-probed", 15, () => false);
    for (const a of answers.filter((x) => x.backend !== "wedged")) expect(a.status).toBe(200);
    // Its health endpoint answers ok, as a hung engine's does: a breaker its silence opened is not
    // probed, so no good probe takes it out of open (it was probed only while it was closed: never).
    expect(upstream.stats("wedged").health).toBe(0);
    expect(upstream.stats("wedged").requests).toBeLessThanOrEqual(CONSECUTIVE + CLIENTS - 1);
    expect(await breakerOf("wedged-probed", "wedged")).toBe("open");
  });

  it("streamed: a breaker its first-token timeouts opened stays open through good health probes, and no stream waits on it again", async () => {
    upstream.reset();
    const answers = await traffic("wedged-probed-streamed", 15, () => true);
    for (const a of answers) expect([a.status, a.backend === "wedged"]).toEqual([200, false]);
    expect(upstream.stats("wedged").health).toBe(0);
    expect(upstream.stats("wedged").requests).toBeLessThanOrEqual(CONSECUTIVE + CLIENTS - 1);
    expect(await breakerOf("wedged-probed-streamed", "wedged")).toBe("open");
  });
});

describe("a wedged backend alone in its shard", () => {
  it("non-streamed: the group's other shards serving is evidence too, and its breaker opens", async () => {
    upstream.reset();
    const answers = await traffic("wedged-sharded", 15, () => false);
    for (const a of answers.filter((x) => x.backend === "wedged")) expect([a.status, a.code]).toEqual([504, "upstream_timeout"]);
    for (const a of answers.filter((x) => x.backend !== "wedged")) expect(a.status).toBe(200);
    expect(upstream.stats("wedged").requests).toBeLessThanOrEqual(CONSECUTIVE + CLIENTS - 1);
    expect(await breakerOf("wedged-sharded", "wedged")).toBe("open");
  });
});

describe("a backend that sends a non-streamed answer's headers and half its body, then stalls", () => {
  it("where the gateway reads the answer whole: a 504 at the timeout, and the silence opens its breaker as a wedged one's does", async () => {
    upstream.reset();
    const answers = await traffic("stalled-whole", 15, () => false);
    for (const a of answers.filter((x) => x.backend === "stalled")) expect([a.status, a.code]).toEqual([504, "upstream_timeout"]);
    for (const a of answers.filter((x) => x.backend !== "stalled")) expect(a.status).toBe(200);
    expect(upstream.stats("stalled-body").requests).toBeLessThanOrEqual(CONSECUTIVE + CLIENTS - 1);
    expect(await breakerOf("stalled-whole", "stalled")).toBe("open");
  });
});

describe("a long non-streamed answer on a backend that answers other requests meanwhile", () => {
  it("is the request's own: a 504, and no breaker opens, even at one failure", async () => {
    // Past the timeout on sim-0 (round-robin's first pick), while short requests go to both.
    const long = chat("long-answer", false, { kvgate_sim: { first_byte_delay_ms: TIMEOUT_MS * 3 } });
    let done = false;
    void long.finally(() => (done = true));
    const short: Answered[] = [];
    while (!done) short.push(await chat("long-answer", false));
    const a = await long;
    expect([a.status, a.code, a.backend]).toEqual([504, "upstream_timeout", "sim-0"]);
    expect(short.filter((x) => x.backend === "sim-0" && x.status === 200).length).toBeGreaterThan(0);
    await vi.waitFor(async () => expect(await gw.inFlight("long-answer")).toBe(0), EVENTUALLY);
    const s = await gw.status("long-answer");
    expect(s.backends.map((b) => [b.id, b.breaker.state, b.failed])).toEqual([
      ["sim-0", "closed", 0],
      ["sim-1", "closed", 0],
    ]);
  });
});

describe("an engine that hung with a stream under way", () => {
  it("its stream's renewals said once that it began, not for ever: the non-streamed requests it leaves unanswered open its breaker", async () => {
    upstream.reset();
    // A stream on it: its first token comes, then nothing, and the client keeps it open.
    const held = new AbortController();
    for (let i = 0; i < 3 && upstream.stats("hung-engine").requests === 0; i++) {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "hung-mid-stream", messages: [{ role: "user", content: `stream ${i}` }], max_tokens: 4, stream: true }),
        signal: held.signal,
      });
      if (res.headers.get("x-kvgate-backend") !== "hung") await res.text();
    }
    expect(upstream.stats("hung-engine").requests).toBe(1);
    try {
      const answers = await traffic("hung-mid-stream", 15, () => false);
      for (const a of answers.filter((x) => x.backend === "hung")) expect([a.status, a.code]).toEqual([504, "upstream_timeout"]);
      // Its stream, then at most a round of each client's requests routed before the renewal that told
      // its first token (they are not its failures: it had served), then the wedged backend's bound.
      expect(upstream.stats("hung-engine").requests).toBeLessThanOrEqual(1 + CLIENTS + CONSECUTIVE + CLIENTS - 1);
      expect(await breakerOf("hung-mid-stream", "hung")).toBe("open");
    } finally {
      held.abort();
    }
  });
});
