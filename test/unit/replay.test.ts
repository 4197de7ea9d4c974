import http from "node:http";
import { afterEach, describe, expect, it } from "vitest";
import { outputText } from "../../bench/fleet/output-text.ts";
import { getJson } from "../../bench/fleet/sim-client.ts";
import { replay, summarize, type RequestResult } from "../../bench/replay/index.ts";
import { generateTrace, type ChatMessage, type Trace } from "../../bench/traces/index.ts";
import { useFleets } from "../support/fleets.ts";

const fleetOf = useFleets();
const MODEL = "kvgate-sim";

interface Logged {
  headers: Record<string, string>;
  body: { model: string; messages: ChatMessage[]; max_tokens: number; stream: boolean; stream_options: unknown; [key: string]: unknown };
}

async function worker(options: Parameters<typeof fleetOf>[0] = {}): Promise<string> {
  const fleet = await fleetOf({ workers: 1, requestLogSize: 500, ...options });
  return fleet.urls[0] ?? "";
}

async function logged(url: string): Promise<Logged[]> {
  return (await getJson(`${url}/sim/requests`)).json as Logged[];
}

/** The logged requests of one session, in arrival order: those carrying its first user message. */
function sessionLog(log: Logged[], trace: Trace, index: number): Logged[] {
  const marker = trace.sessions[index]?.turns[0]?.add.find((m) => m.role === "user")?.content;
  return log.filter((entry) => entry.body.messages.some((m) => m.content === marker));
}

const bySession = (results: RequestResult[], id: string): RequestResult[] => results.filter((r) => r.session === id);

describe("replay against a fleet worker", () => {
  it("runs every session's turns in order and appends the reply the worker streamed", async () => {
    const url = await worker();
    const trace = generateTrace("multi-turn", { sessions: 3, turns: 4 });
    const result = await replay(trace, { baseUrl: url, model: MODEL });

    expect(result.requests).toHaveLength(12);
    expect(result.requests.map((r) => `${r.session}/${r.turn}`)).toEqual(
      trace.sessions.flatMap((s) => s.turns.map((_, t) => `${s.id}/${t}`)),
    );
    for (const r of result.requests) {
      expect(r).toMatchObject({ status: 200, error: null, completionTokens: 64, backend: null, reason: null });
      expect(r.ttftMs).not.toBeNull();
      expect(r.ttftMs ?? Infinity).toBeLessThanOrEqual(r.totalMs);
      expect(r.promptTokens).toBeGreaterThan(1500);
    }

    const log = await logged(url);
    expect(log).toHaveLength(12);
    trace.sessions.forEach((session, s) => {
      const sent = sessionLog(log, trace, s);
      expect(sent).toHaveLength(4);
      const expected: ChatMessage[] = [];
      session.turns.forEach((turn, t) => {
        expected.push(...turn.add);
        expect(sent[t]?.body.messages).toEqual(expected);
        expect(sent[t]?.body).toMatchObject({ model: MODEL, max_tokens: 64, stream: true, stream_options: { include_usage: true } });
        // What the worker streams for 64 tokens; the next turn must carry it back verbatim.
        expected.push({ role: "assistant", content: outputText(64) });
      });
    });
  });

  it("reports cached tokens rising over a conversation's turns on one worker", async () => {
    const url = await worker();
    const trace = generateTrace("multi-turn", { sessions: 1, turns: 6, seed: 5 });
    const { requests } = await replay(trace, { baseUrl: url, model: MODEL });
    expect(requests[0]?.cachedTokens).toBe(0);
    for (let t = 1; t < requests.length; t++) {
      // The previous prompt and its answer are cached: the hit covers more than the whole previous prompt.
      expect(requests[t]?.cachedTokens ?? 0).toBeGreaterThan(requests[t - 1]?.promptTokens ?? Infinity);
    }
    expect(summarize({ requests, wallMs: 0 }).kv_hit).toBeGreaterThan(0.7);
  });

  it("replays a tool loop with the trace's tool calls and results, without the server's text", async () => {
    const url = await worker();
    const trace = generateTrace("tool-loop", { sessions: 2, turns: 4 });
    const { requests } = await replay(trace, { baseUrl: url, model: MODEL });
    expect(requests.every((r) => r.error === null)).toBe(true);
    const log = await logged(url);
    trace.sessions.forEach((session, s) => {
      const sent = sessionLog(log, trace, s);
      const expected: ChatMessage[] = [];
      session.turns.forEach((turn, t) => {
        expected.push(...turn.add);
        expect(sent[t]?.body.messages).toEqual(expected);
      });
    });
    // No reply appended: the previous prompt is the shared prefix, cached up to its last full block.
    for (let t = 1; t < 4; t++) expect(requests[t]?.cachedTokens ?? 0).toBeGreaterThan((requests[t - 1]?.promptTokens ?? Infinity) - 16);
  });

  it("sends independent requests alone, with the API key, headers and extra body fields", async () => {
    const url = await worker();
    const trace = generateTrace("rag", { sessions: 2, turns: 3 });
    const { requests } = await replay(trace, {
      baseUrl: `${url}/`,
      model: MODEL,
      apiKey: "sk-replay",
      headers: { "x-trace": "rag" },
      extraBody: { top_k: 5, max_tokens: 1, model: "other" },
    });
    expect(requests.every((r) => r.error === null)).toBe(true);
    const log = await logged(url);
    expect(log).toHaveLength(6);
    for (const entry of log) {
      expect(entry.body.messages).toHaveLength(2);
      expect(entry.headers).toMatchObject({ authorization: "Bearer sk-replay", "x-trace": "rag" });
      expect(entry.body).toMatchObject({ top_k: 5, max_tokens: 64, model: MODEL });
    }
  });
});

describe("replay failures are recorded, never thrown", () => {
  it("records 500s and goes on with every session, without appending a reply after a failed turn", async () => {
    const url = await worker({ errorRate: 0.3, seed: 3 });
    const trace = generateTrace("multi-turn", { sessions: 8, turns: 5 });
    const { requests } = await replay(trace, { baseUrl: url, model: MODEL });
    expect(requests).toHaveLength(40);
    const failed = requests.filter((r) => r.error !== null);
    expect(failed.length).toBeGreaterThan(0);
    expect(failed.length).toBeLessThan(40);
    for (const r of failed) {
      expect(r.status).toBe(500);
      expect(r.error).toMatch(/^HTTP 500: simulated worker error/);
      expect(r.promptTokens).toBeNull();
    }
    expect(summarize({ requests, wallMs: 0 }).errors).toBe(failed.length);

    const log = await logged(url);
    expect(log).toHaveLength(40);
    trace.sessions.forEach((session, s) => {
      const results = bySession(requests, session.id);
      expect(results.map((r) => r.turn)).toEqual([0, 1, 2, 3, 4]);
      const sent = sessionLog(log, trace, s);
      for (let t = 1; t < 5; t++) {
        const messages = sent[t]?.body.messages ?? [];
        // The message before this turn's user message: the previous reply, or (after a failure) the previous user turn.
        expect(messages.at(-2)?.role).toBe(results[t - 1]?.error === null ? "assistant" : "user");
      }
    });
  });

  it("records a status sent through extraBody for every request", async () => {
    const url = await worker();
    const trace = generateTrace("multi-turn", { sessions: 3, turns: 2 });
    const { requests } = await replay(trace, { baseUrl: url, model: MODEL, extraBody: { kvgate_sim: { fail_status: 503 } } });
    expect(requests).toHaveLength(6);
    for (const r of requests) expect(r).toMatchObject({ status: 503, ttftMs: null, cachedTokens: null });
    expect(requests.every((r) => r.error?.includes("fail_status=503"))).toBe(true);
  });

  it("records a stream that breaks mid-way, after its first tokens", async () => {
    const url = await worker();
    const trace = generateTrace("single-turn", { sessions: 2, turns: 2 });
    const { requests } = await replay(trace, { baseUrl: url, model: MODEL, extraBody: { kvgate_sim: { fail_after_chunks: 3 } } });
    for (const r of requests) {
      expect(r.status).toBe(200);
      expect(r.error).toMatch(/closed|broke|aborted/);
      expect(r.ttftMs).not.toBeNull();
      expect(r.promptTokens).toBeNull();
    }
  });

  it("times out a stalled stream and goes on to the next turn", async () => {
    const url = await worker();
    const trace = generateTrace("multi-turn", { sessions: 2, turns: 2, systemKB: 1 });
    const { requests } = await replay(trace, {
      baseUrl: url,
      model: MODEL,
      timeoutMs: 200,
      extraBody: { kvgate_sim: { stall_after_chunks: 1 } },
    });
    expect(requests).toHaveLength(4);
    for (const r of requests) expect(r.error).toBe("timed out after 200 ms");
    // Marked as timed out, for the summaries' TTFT; the one chunk before the stall is its first token.
    for (const r of requests) expect(r).toMatchObject({ timedOutMs: 200, ttftMs: expect.any(Number) });
  });

  it("records a refused connection with status 0", async () => {
    const fleet = await fleetOf({ workers: 1 });
    await fleet.close();
    const trace = generateTrace("single-turn", { sessions: 2, turns: 2 });
    const { requests } = await replay(trace, { baseUrl: fleet.urls[0] ?? "", model: MODEL });
    expect(requests).toHaveLength(4);
    for (const r of requests) {
      expect(r.status).toBe(0);
      expect(r.error).toMatch(/^request failed: .*ECONNREFUSED/);
    }
  });
});

describe("replay against another OpenAI-compatible server", () => {
  const servers: http.Server[] = [];
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
  });

  /** A gateway stand-in: routing headers, CRLF events cut into awkward chunks, and the reply its body's `script` asks for. */
  async function gateway(): Promise<string> {
    const events = [
      'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
      'data: {"choices":[{"index":0,"delta":{"content":"Grüße"}}]}',
      'data: {"choices":[],"usage":{"prompt_tokens":40,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":32}}}',
    ];
    const server = http.createServer((req, res) => {
      let raw = "";
      req.on("data", (c: Buffer) => (raw += c.toString()));
      req.on("end", () => {
        const script = (JSON.parse(raw) as { script?: string }).script;
        if (script === "json") return void res.writeHead(200, { "content-type": "application/json" }).end("{}");
        res.writeHead(200, { "content-type": "text/event-stream", "x-kvgate-backend": "gpu-2", "x-kvgate-reason": "prefix" });
        const tail = script === "error" ? 'event: error\r\ndata: {"error":{"message":"upstream went away"}}\r\n\r\n' : "data: [DONE]\r\n\r\n";
        const bytes = Buffer.from(events.map((e) => `${e}\r\n\r\n`).join("") + tail);
        for (let o = 0; o < bytes.length; o += 7) res.write(bytes.subarray(o, o + 7));
        res.end();
      });
    });
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    if (address === null || typeof address === "string") throw new Error("no port");
    return `http://127.0.0.1:${address.port}`;
  }

  const trace = generateTrace("multi-turn", { sessions: 2, turns: 2, systemKB: 1 });

  it("reads the routing headers, the reply and the usage", async () => {
    const { requests } = await replay(trace, { baseUrl: await gateway(), model: MODEL });
    for (const r of requests) {
      expect(r).toMatchObject({ status: 200, error: null, backend: "gpu-2", reason: "prefix", promptTokens: 40, cachedTokens: 32, completionTokens: 1 });
    }
    expect(summarize({ requests, wallMs: 0 }).backend_share).toEqual({ "gpu-2": 1 });
  });

  it("records an SSE error event, and a 200 that is not an event stream", async () => {
    const url = await gateway();
    const errored = await replay(trace, { baseUrl: url, model: MODEL, extraBody: { script: "error" } });
    for (const r of errored.requests) expect(r.error).toBe("error event: upstream went away");
    const json = await replay(trace, { baseUrl: url, model: MODEL, extraBody: { script: "json" } });
    for (const r of json.requests) expect(r.error).toBe("expected an event stream, got application/json");
  });
});
