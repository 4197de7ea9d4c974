import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { postJson, readSse, type ChunkBody, type CompletionBody, type ErrorBody } from "../../bench/fleet/sim-client.ts";

let fleet: Fleet;
let chatUrl: string;

beforeAll(async () => {
  fleet = await startFleet({ workers: 1, basePort: 0, preset: "instant" });
  chatUrl = `${fleet.urls[0] ?? ""}/v1/chat/completions`;
});
afterAll(() => fleet.close());

const request = (sim: Record<string, unknown>, extra: Record<string, unknown> = {}): Record<string, unknown> => ({
  model: "kvgate-sim",
  messages: [{ role: "user", content: "hello" }],
  max_tokens: 5,
  kvgate_sim: sim,
  ...extra,
});

const contentEvents = (events: { data: string }[]): ChunkBody[] =>
  events
    .filter((e) => e.data !== "[DONE]")
    .map((e) => JSON.parse(e.data) as ChunkBody)
    .filter((c) => typeof c.choices[0]?.delta?.content === "string" && c.choices[0].delta.content !== "");

describe("kvgate_sim controls", () => {
  it("fail_status answers that status with an OpenAI error body", async () => {
    for (const status of [429, 503]) {
      const r = await postJson(chatUrl, request({ fail_status: status }));
      expect(r.status).toBe(status);
      const body = r.json as ErrorBody;
      expect(body.error).toMatchObject({ code: status, param: null });
      expect(typeof body.error.message).toBe("string");
      expect(typeof body.error.type).toBe("string");
    }
  });

  it("fail_status applies to streaming requests too, before any event", async () => {
    const read = await readSse(chatUrl, request({ fail_status: 500 }, { stream: true }));
    expect(read.status).toBe(500);
    expect(read.contentType).toBe("application/json");
  });

  it("fail_after_chunks sends N content events then breaks the connection without [DONE]", async () => {
    const read = await readSse(chatUrl, request({ fail_after_chunks: 2 }, { stream: true }));
    expect(read.status).toBe(200);
    expect(read.ended).toBe("error");
    expect(contentEvents(read.events)).toHaveLength(2);
    expect(read.events.some((e) => e.data === "[DONE]")).toBe(false);
  });

  it("fail_after_chunks on a non-streaming request breaks the connection instead of answering", async () => {
    await expect(postJson(chatUrl, request({ fail_after_chunks: 0 }))).rejects.toThrow();
  });

  it("chunk_delay_ms spaces the events out, and they arrive one by one", async () => {
    const read = await readSse(chatUrl, request({ chunk_delay_ms: 120 }, { stream: true, max_tokens: 4 }));
    expect(read.ended).toBe("done");
    const times = read.events.map((e) => e.at);
    const first = times[0] ?? 0;
    const last = times.at(-1) ?? 0;
    // 3 delays of 120 ms separate the first content event from the last; half of that is
    // a generous floor that still proves the events were not buffered until the end.
    expect(last - first).toBeGreaterThan(180);
    expect(contentEvents(read.events)).toHaveLength(4);
  });

  it("first_byte_delay_ms holds the response back", async () => {
    const start = performance.now();
    const r = await postJson(chatUrl, request({ first_byte_delay_ms: 150 }));
    expect(r.status).toBe(200);
    expect(performance.now() - start).toBeGreaterThan(100);
  });

  it("tokens overrides max_tokens", async () => {
    const r = await postJson(chatUrl, request({ tokens: 11 }));
    expect((r.json as CompletionBody).usage.completion_tokens).toBe(11);
  });

  it("stall_after_chunks stops sending but keeps the connection open", async () => {
    // A stall is a stall however long the client waits: 3 s, so that a loaded machine's slow
    // first events are not cut short.
    const read = await readSse(chatUrl, request({ stall_after_chunks: 1 }, { stream: true }), AbortSignal.timeout(3000));
    expect(read.status).toBe(200);
    // Ended only because the client gave up waiting.
    expect(read.ended).toBe("error");
    expect(contentEvents(read.events)).toHaveLength(1);
  }, 15_000);

  it("rejects an unknown or malformed control with 400, so a typo cannot pass silently", async () => {
    const typo = await postJson(chatUrl, request({ fail_after_chunk: 1 }));
    expect(typo.status).toBe(400);
    expect((typo.json as ErrorBody).error.message).toContain("fail_after_chunk");
    const bad = await postJson(chatUrl, request({ fail_status: 200 }));
    expect(bad.status).toBe(400);
  });
});
