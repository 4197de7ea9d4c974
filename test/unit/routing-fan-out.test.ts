import http from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { replay, summarize } from "../../bench/replay/index.ts";
import { instanceFor, startFanOut, type FanOut } from "../../bench/routing/fan-out.ts";
import { workerRequestCounts } from "../../bench/routing/worker-share.ts";
import { generateTrace } from "../../bench/traces/index.ts";
import { closedPort } from "../support/closed-port.ts";
import { useFleets } from "../support/fleets.ts";

/**
 * bench:routing-replicas's fan-out, on real sockets: what it sends each instance, how it picks
 * one, and that an answer's stream crosses it as it comes, with instances that are small HTTP
 * servers recording what reached them (and, last, the simulated fleet through the replay client).
 */

interface Received {
  instance: number;
  method: string;
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

interface Instance {
  url: string;
  server: http.Server;
}

const fleetOf = useFleets();
const servers: http.Server[] = [];
const fanOuts: FanOut[] = [];
afterEach(async () => {
  await Promise.all(fanOuts.splice(0).map((f) => f.close()));
  for (const s of servers.splice(0)) s.closeAllConnections();
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
});

/** An instance that answers every request with a JSON echo of what it received, or as `handle` says. */
async function instance(index: number, log: Received[], handle?: (req: http.IncomingMessage, res: http.ServerResponse) => void): Promise<Instance> {
  const server = http.createServer((req, res) => {
    let body = "";
    req.setEncoding("utf8").on("data", (d: string) => (body += d));
    req.on("end", () => {
      log.push({ instance: index, method: req.method ?? "", path: req.url ?? "", headers: req.headers, body });
      if (handle) return handle(req, res);
      res.writeHead(200, { "content-type": "application/json", "x-instance": String(index) });
      res.end(JSON.stringify({ instance: index }));
    });
  });
  servers.push(server);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, server };
}

async function fanOutOver(urls: string[], seed = 1): Promise<FanOut> {
  const f = await startFanOut(urls, seed);
  fanOuts.push(f);
  return f;
}

describe("the fan-out in front of N instances", () => {
  it("sends each request whole to one instance and relays its answer as the instance gave it", async () => {
    const log: Received[] = [];
    const f = await fanOutOver([(await instance(0, log)).url, (await instance(1, log)).url]);
    const body = JSON.stringify({ model: "m", messages: [{ role: "user", content: "é and more" }] });
    const res = await fetch(`${f.url}/v1/chat/completions?x=1`, { method: "POST", headers: { authorization: "Bearer sk-test", "content-type": "application/json" }, body });
    expect(res.status).toBe(200);
    const picked = instanceFor(Buffer.from(body), 1, 2);
    expect(res.headers.get("x-instance")).toBe(String(picked));
    expect(await res.json()).toEqual({ instance: picked });
    expect(log).toHaveLength(1);
    const got = log[0] as Received;
    expect(got).toMatchObject({ instance: picked, method: "POST", path: "/v1/chat/completions?x=1", body });
    expect(got.headers.authorization).toBe("Bearer sk-test");
    expect(got.headers["content-type"]).toBe("application/json");
    expect(f.counts()).toEqual(picked === 0 ? [1, 0] : [0, 1]);
  });

  it("picks per request by a seeded hash of the body: spread evenly, the same body to the same instance, turns of one session apart", async () => {
    const bodies = Array.from({ length: 400 }, (_, i) => Buffer.from(`{"messages":[${i}]}`));
    const picks = bodies.map((b) => instanceFor(b, 7, 4));
    // A uniform draw gives 100 ± 9 each; 60–140 is over four standard deviations.
    for (const i of [0, 1, 2, 3]) {
      const n = picks.filter((p) => p === i).length;
      expect(n).toBeGreaterThan(60);
      expect(n).toBeLessThan(140);
    }
    expect(bodies.map((b) => instanceFor(Buffer.from(b), 7, 4))).toEqual(picks);
    const moved = bodies.filter((b) => instanceFor(b, 7, 4) !== instanceFor(b, 8, 4)).length;
    expect(moved).toBeGreaterThan(200);
    // A conversation's turns grow its body, so each lands where its own hash says: not sticky.
    const turns: string[] = [];
    let history = '{"role":"system","content":"shared"}';
    for (let t = 0; t < 8; t++) {
      history += `,{"role":"user","content":"turn ${t}"}`;
      turns.push(history);
    }
    expect(new Set(turns.map((t) => instanceFor(Buffer.from(t), 1, 4))).size).toBeGreaterThan(1);

    const log: Received[] = [];
    const f = await fanOutOver(await Promise.all([0, 1, 2, 3].map(async (i) => (await instance(i, log)).url)), 7);
    for (const b of bodies.slice(0, 40)) await (await fetch(f.url, { method: "POST", body: b })).text();
    expect(log.map((r) => r.instance)).toEqual(picks.slice(0, 40));
  });

  it("relays a stream as it comes: the first event reaches the client while the instance still holds the rest", async () => {
    let finish = (): void => {};
    const held = new Promise<void>((r) => (finish = r));
    const log: Received[] = [];
    const f = await fanOutOver([
      (
        await instance(0, log, (_req, res) => {
          res.writeHead(200, { "content-type": "text/event-stream" });
          res.write('data: {"first":true}\n\n');
          void held.then(() => res.end("data: [DONE]\n\n"));
        })
      ).url,
    ]);
    const res = await fetch(f.url, { method: "POST", body: "{}" });
    expect(res.headers.get("content-type")).toBe("text/event-stream");
    const reader = (res.body as ReadableStream<Uint8Array>).getReader();
    const first = await reader.read();
    expect(new TextDecoder().decode(first.value)).toBe('data: {"first":true}\n\n');
    finish();
    let rest = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) rest += new TextDecoder().decode(r.value);
    expect(rest).toBe("data: [DONE]\n\n");
  });

  it("closes the request at the instance when its client leaves mid-stream", async () => {
    let instanceSawClose: () => void = () => {};
    const closed = new Promise<void>((r) => (instanceSawClose = r));
    const log: Received[] = [];
    const f = await fanOutOver([
      (
        await instance(0, log, (_req, res) => {
          res.writeHead(200, { "content-type": "text/event-stream" });
          res.write("data: {}\n\n");
          res.on("close", () => instanceSawClose());
        })
      ).url,
    ]);
    const leave = new AbortController();
    const res = await fetch(f.url, { method: "POST", body: "{}", signal: leave.signal });
    await (res.body as ReadableStream<Uint8Array>).getReader().read();
    leave.abort();
    await closed;
  });

  it("answers 502 with an OpenAI-style error when the instance cannot be reached", async () => {
    const f = await fanOutOver([`http://127.0.0.1:${await closedPort()}`]);
    const res = await fetch(`${f.url}/v1/chat/completions`, { method: "POST", body: "{}" });
    expect(res.status).toBe(502);
    const body = (await res.json()) as { error: { message: string; type: string } };
    expect(body.error.type).toBe("fan_out_error");
    expect(body.error.message).toMatch(/^fan-out: instance 0 failed: /);
  });

  it("spreads a replayed trace over the simulated fleet's workers, each request where the fan-out counted it", { timeout: 30_000 }, async () => {
    const fleet = await fleetOf({ workers: 4 });
    const f = await fanOutOver(fleet.urls, 3);
    const before = await workerRequestCounts(fleet.urls);
    const result = await replay(generateTrace("multi-turn", { sessions: 8, turns: 4, seed: 3 }), { baseUrl: f.url, model: "kvgate-sim" });
    const s = summarize(result);
    expect(s.errors).toBe(0);
    expect(s.requests).toBe(32);
    const after = await workerRequestCounts(fleet.urls);
    expect(after.map((n, i) => n - (before[i] ?? 0))).toEqual(f.counts());
    for (const n of f.counts()) expect(n).toBeGreaterThan(0);
  });
});
