import { request } from "node:http";
import { createServer, type Server } from "node:net";
import { describe, expect, it } from "vitest";
import { startFleet } from "../../bench/fleet/index.ts";
import { useFleets } from "../support/fleets.ts";
import { getJson, postJson, type ErrorBody } from "../../bench/fleet/sim-client.ts";

const fleetOf = useFleets();

interface Logged {
  path: string;
  headers: Record<string, string>;
  body: Record<string, unknown> | null;
}

/** A request carrying curl --http2's offer of h2c on an http:// URL; the answer's status line and body. */
function offeringH2c(url: string, method: string, body = ""): Promise<{ status: string; body: string }> {
  const headers = { connection: "Upgrade, HTTP2-Settings", upgrade: "h2c", "http2-settings": "AAMAAABkAARAAAAAAAIAAAAA", "content-type": "application/json" };
  return new Promise((done, fail) => {
    const req = request(url, { method, headers }, (res) => {
      let text = "";
      res.setEncoding("utf8").on("data", (d: string) => (text += d));
      res.on("end", () => done({ status: `HTTP/${res.httpVersion} ${res.statusCode} ${res.statusMessage}`, body: text }));
    });
    req.on("error", fail);
    req.end(body);
  });
}

describe("fleet endpoints", () => {
  it("starts the requested number of workers on 127.0.0.1", async () => {
    const fleet = await fleetOf({ workers: 3 });
    expect(fleet.urls).toHaveLength(3);
    expect(new Set(fleet.ports).size).toBe(3);
    for (const [i, url] of fleet.urls.entries()) expect(url).toBe(`http://127.0.0.1:${fleet.ports[i]}`);
    const health = await Promise.all(fleet.urls.map((u) => getJson(`${u}/health`)));
    expect(health.map((h) => h.json)).toEqual([{ status: "ok" }, { status: "ok" }, { status: "ok" }]);
  });

  it("answers 404 with an OpenAI error when the model is not the served one", async () => {
    const fleet = await fleetOf({ workers: 1, servedModelName: "upstream-name" });
    const url = `${fleet.urls[0]}/v1/chat/completions`;
    const wrong = await postJson(url, { model: "kvgate-sim", messages: [{ role: "user", content: "hi" }] });
    expect(wrong.status).toBe(404);
    expect((wrong.json as ErrorBody).error).toMatchObject({ code: 404, param: "model", type: "NotFoundError" });
    const right = await postJson(url, { model: "upstream-name", messages: [{ role: "user", content: "hi" }], max_tokens: 1 });
    expect(right.status).toBe(200);
  });

  it("answers 400 with an OpenAI error for malformed JSON and invalid requests", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const url = `${fleet.urls[0]}/v1/chat/completions`;
    const cases: unknown[] = ['{"model": "kvgate-sim", "messages": [', { model: "kvgate-sim" }, { model: "kvgate-sim", messages: [{ role: "user", content: "x" }], max_tokens: 0 }];
    for (const body of cases) {
      const r = await postJson(url, body);
      expect(r.status).toBe(400);
      expect((r.json as ErrorBody).error).toMatchObject({ code: 400, type: "BadRequestError" });
    }
  });

  it("refuses a request longer than max-model-len as vLLM does", async () => {
    const fleet = await fleetOf({ workers: 1, maxModelLen: 100 });
    const r = await postJson(`${fleet.urls[0]}/v1/completions`, { model: "kvgate-sim", prompt: "x".repeat(400), max_tokens: 10 });
    expect(r.status).toBe(400);
    expect((r.json as ErrorBody).error.message).toContain("maximum context length is 100 tokens");
  });

  it("lists the served model", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const r = await getJson(`${fleet.urls[0]}/v1/models`);
    expect(r.json).toMatchObject({ object: "list", data: [{ id: "kvgate-sim", object: "model" }] });
  });

  it("exposes Prometheus metrics per worker", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const base = fleet.urls[0] ?? "";
    const messages = [{ role: "user", content: "y".repeat(200) }];
    await postJson(`${base}/v1/chat/completions`, { model: "kvgate-sim", messages, max_tokens: 1 });
    await postJson(`${base}/v1/chat/completions`, { model: "kvgate-sim", messages, max_tokens: 1 });
    const res = await fetch(`${base}/metrics`);
    expect(res.headers.get("content-type")).toContain("text/plain");
    const text = await res.text();
    const value = (name: string): number => Number(new RegExp(`^${name}\\{[^}]*\\} (\\S+)$`, "m").exec(text)?.[1]);
    expect(value("kvgate_sim_requests_total")).toBe(2);
    expect(value("kvgate_sim_requests_running")).toBe(0);
    expect(value("kvgate_sim_requests_queued")).toBe(0);
    expect(value("kvgate_sim_kv_blocks_used")).toBe(0);
    expect(value("kvgate_sim_kv_blocks_capacity")).toBe(262144);
    expect(value("kvgate_sim_prompt_tokens_total")).toBeGreaterThan(100);
    expect(value("kvgate_sim_cached_tokens_total")).toBeGreaterThan(0);
    expect(text).toMatch(/^vllm:num_requests_waiting\{/m);
  });

  it("says which worker answered on every response, a 405 included", async () => {
    const fleet = await fleetOf({ workers: 2 });
    const wrongMethod = await fetch(`${fleet.urls[1]}/v1/chat/completions`);
    expect([wrongMethod.status, wrongMethod.headers.get("x-sim-worker")]).toEqual([405, "1"]);
    const unknown = await fetch(`${fleet.urls[1]}/nowhere`);
    expect([unknown.status, unknown.headers.get("x-sim-worker")]).toEqual([404, "1"]);
  });

  it("answers a client that offers h2c (curl --http2 on http://) over HTTP/1.1, as vLLM does", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const base = fleet.urls[0] ?? "";
    expect(await offeringH2c(`${base}/health`, "GET")).toEqual({ status: "HTTP/1.1 200 OK", body: '{"status":"ok"}' });
    const chat = await offeringH2c(`${base}/v1/chat/completions`, "POST", JSON.stringify({ model: "kvgate-sim", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }));
    expect(chat.status).toBe("HTTP/1.1 200 OK");
    expect(JSON.parse(chat.body)).toMatchObject({ object: "chat.completion", usage: { completion_tokens: 2 } });
  });

  it("records the last requests' path, headers and parsed body at /sim/requests", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const base = fleet.urls[0] ?? "";
    const body = {
      model: "kvgate-sim",
      messages: [{ role: "user", content: "hi" }],
      max_tokens: 2,
      top_k: 40,
      min_p: 0.05,
      chat_template_kwargs: { enable_thinking: false },
    };
    await fetch(`${base}/v1/chat/completions?trace=1`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-custom": "kept" },
      body: JSON.stringify(body),
    }).then((r) => r.text());
    const log = (await getJson(`${base}/sim/requests`)).json as Logged[];
    expect(log).toHaveLength(1);
    expect(log[0]?.path).toBe("/v1/chat/completions?trace=1");
    expect(log[0]?.headers["x-custom"]).toBe("kept");
    expect(log[0]?.body).toEqual(body);

    await fetch(`${base}/sim/requests`, { method: "DELETE" });
    expect((await getJson(`${base}/sim/requests`)).json).toEqual([]);
  });

  it("keeps only the last 50 requests, oldest first", async () => {
    const fleet = await fleetOf({ workers: 1 });
    const base = fleet.urls[0] ?? "";
    for (let i = 0; i < 55; i++) {
      await postJson(`${base}/v1/completions`, { model: "kvgate-sim", prompt: `n${i}`, max_tokens: 1 });
    }
    const log = (await getJson(`${base}/sim/requests`)).json as Logged[];
    expect(log).toHaveLength(50);
    expect(log[0]?.body?.prompt).toBe("n5");
    expect(log[49]?.body?.prompt).toBe("n54");
  });
});

describe("close()", () => {
  it("frees every port, even with a stalled stream open", async () => {
    const fleet = await startFleet({ workers: 2, basePort: 0, preset: "instant" });
    const stalled = await fetch(`${fleet.urls[0]}/v1/chat/completions`, {
      method: "POST",
      body: JSON.stringify({ messages: [{ role: "user", content: "x" }], stream: true, kvgate_sim: { stall_after_chunks: 0 } }),
    });
    expect(stalled.status).toBe(200);
    const body = stalled.text().catch(() => "broken");
    await fleet.close();
    expect(await body).toBe("broken");
    for (const port of fleet.ports) {
      await expect(fetch(`http://127.0.0.1:${port}/health`)).rejects.toThrow();
      await listenOnce(port);
    }
  });

  it("rejects and cleans up when a port is taken", async () => {
    const { blocker, port } = await blockedPortAfterFreeOne();
    try {
      // Worker 0 gets port - 1; worker 1 needs the blocked port.
      await expect(startFleet({ workers: 2, basePort: port - 1, preset: "instant" })).rejects.toThrow(/EADDRINUSE/);
      await listenOnce(port - 1);
    } finally {
      await new Promise((resolve) => blocker.close(resolve));
    }
  });
});

function listenOnce(port: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(port, "127.0.0.1", () => server.close(() => resolve()));
  });
}

/** An occupied port whose predecessor is free. */
async function blockedPortAfterFreeOne(): Promise<{ blocker: Server; port: number }> {
  for (;;) {
    const blocker = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
    const address = blocker.address();
    const port = typeof address === "object" && address ? address.port : 0;
    if (port > 1024 && (await listenOnce(port - 1).then(() => true, () => false))) return { blocker, port };
    await new Promise((resolve) => blocker.close(resolve));
  }
}
