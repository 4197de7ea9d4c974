import { describe, expect, it } from "vitest";
import { readableLogLine } from "../../bench/start/log-lines.ts";

const time = "2026-03-01T12:01:02.345Z";
const clock = new Date(time).toTimeString().slice(0, 8);

const request = {
  type: "request", time, level: "info", request_id: "r1", key_id: "key_ab12cd34ef", method: "POST", path: "/v1/chat/completions",
  model: "kvgate-sim", group: "kvgate-sim", backend: "sim-2", reason: "prefix-hit", matched_blocks: 12, total_blocks: 14, attempts: 1,
  status: 200, ttft_ms: 23.4, duration_ms: 412.2, prompt_tokens: 900, completion_tokens: 40, cached_tokens: 768, error_code: null, stream: true,
};

describe("npm start's readable log lines", () => {
  it("turns a request line into one short line: status, endpoint, routing, timings, tokens, key id cut short", () => {
    expect(readableLogLine(JSON.stringify(request))).toBe(`${clock} 200 chat kvgate-sim → sim-2 prefix-hit 12/14 ttft 23 ms 412 ms 900+40 tok (768 cached) key_ab12…`);
  });

  it("names the endpoint of vLLM's paths outside /v1 and of /v2 as /v1's", () => {
    const named = (path: string) => readableLogLine(JSON.stringify({ ...request, path }))?.split(" ")[2];
    expect(["/v1/chat/completions", "/v1/embeddings", "/rerank", "/v2/rerank", "/score", "/v1/rerank", "/v1/realtime"].map(named)).toEqual(["chat", "embeddings", "rerank", "rerank", "score", "rerank", "realtime"]);
  });

  it("shows an unrouted error answer with its code", () => {
    const line = { ...request, level: "warn", key_id: null, model: null, group: null, backend: null, reason: null, matched_blocks: null, total_blocks: null, attempts: 0, status: 401, ttft_ms: null, duration_ms: 1.2, prompt_tokens: null, completion_tokens: null, cached_tokens: null, error_code: "invalid_api_key" };
    expect(readableLogLine(JSON.stringify(line))).toBe(`${clock} 401 chat invalid_api_key 1 ms`);
  });

  it("says how many attempts a failed-over request took", () => {
    const line = { ...request, reason: "failover", attempts: 2, prompt_tokens: null, key_id: "master" };
    expect(readableLogLine(JSON.stringify(line))).toBe(`${clock} 200 chat kvgate-sim → sim-2 failover 12/14 (2 attempts) ttft 23 ms 412 ms master`);
  });

  it("turns each event into one line", () => {
    const ev = (fields: object) => readableLogLine(JSON.stringify({ type: "event", time, level: "warn", ...fields }));
    expect(ev({ event: "failover", request_id: "r1", group: "kvgate-sim", backend: "sim-1", cause: "5xx", next_attempt: 2 })).toBe(`${clock} failover kvgate-sim sim-1 (5xx) → attempt 2`);
    expect(ev({ event: "breaker", group: "kvgate-sim", backend: "sim-1", from: "closed", to: "open" })).toBe(`${clock} breaker kvgate-sim sim-1 closed → open`);
    expect(ev({ event: "registry", op: "remove-group", rev: 4, changed: [], removed: ["old"] })).toBe(`${clock} registry rev 4 remove-group; removed old`);
    expect(ev({ event: "registry", op: "add-group", rev: 5, changed: ["a", "b"], removed: [] })).toBe(`${clock} registry rev 5 add-group a, b`);
  });

  it("drops wrangler dev's own request lines: the Worker's line says more", () => {
    expect(readableLogLine("[wrangler:info] POST /v1/chat/completions 200 OK (50ms)")).toBeNull();
    expect(readableLogLine("[wrangler:info] GET /v1/models 401 Unauthorized (7ms)")).toBeNull();
    expect(readableLogLine("[wrangler:info] Ready on http://127.0.0.1:8787")).toBe("[wrangler:info] Ready on http://127.0.0.1:8787");
  });

  it("leaves every other line as it is", () => {
    for (const line of ["⎔ Starting local server...", "", "{not json", '{"level":"info"}', JSON.stringify({ type: "other", x: 1 }), "[wrangler:inf] GET /health 200 OK (3ms)"]) {
      expect(readableLogLine(line)).toBe(line);
    }
  });
});
