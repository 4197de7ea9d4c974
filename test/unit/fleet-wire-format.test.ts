import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { postJson, readSse, type ChunkBody, type CompletionBody } from "../../bench/fleet/sim-client.ts";

let fleet: Fleet;
let base: string;

beforeAll(async () => {
  fleet = await startFleet({ workers: 1, basePort: 0, preset: "instant" });
  base = fleet.urls[0] ?? "";
});
afterAll(() => fleet.close());

const messages = [
  { role: "system", content: "You are a terse assistant." },
  { role: "user", content: "Say something." },
];

function chunks(events: { data: string }[]): ChunkBody[] {
  return events.filter((e) => e.data !== "[DONE]").map((e) => JSON.parse(e.data) as ChunkBody);
}

describe("non-streaming responses", () => {
  it("answers a chat completion in the OpenAI shape with usage and cached_tokens", async () => {
    const r = await postJson(`${base}/v1/chat/completions`, { model: "kvgate-sim", messages, max_tokens: 7 });
    expect(r.status).toBe(200);
    expect(r.headers.get("content-type")).toBe("application/json");
    const body = r.json as CompletionBody;
    expect(body).toMatchObject({ object: "chat.completion", model: "kvgate-sim" });
    expect(body.id).toMatch(/^chatcmpl-/);
    expect(Number.isInteger(body.created)).toBe(true);
    expect(body.choices).toHaveLength(1);
    const choice = body.choices[0];
    expect(choice?.index).toBe(0);
    expect(choice?.message?.role).toBe("assistant");
    expect(choice?.message?.content).toHaveLength(7 * 4);
    expect(choice?.finish_reason).toBe("length");
    expect(body.usage.completion_tokens).toBe(7);
    expect(body.usage.prompt_tokens).toBeGreaterThan(0);
    expect(body.usage.total_tokens).toBe(body.usage.prompt_tokens + 7);
    expect(body.usage.prompt_tokens_details.cached_tokens).toBe(0);
  });

  it("answers a text completion, honouring max_completion_tokens", async () => {
    const r = await postJson(`${base}/v1/completions`, { model: "kvgate-sim", prompt: "Once upon a time", max_completion_tokens: 3 });
    expect(r.status).toBe(200);
    const body = r.json as CompletionBody;
    expect(body.object).toBe("text_completion");
    expect(body.id).toMatch(/^cmpl-/);
    expect(body.choices[0]?.text).toHaveLength(12);
    expect(body.usage).toMatchObject({ completion_tokens: 3, prompt_tokens: 4 });
  });

  it("ends with stop after the default length when max_tokens is absent", async () => {
    const r = await postJson(`${base}/v1/chat/completions`, { model: "kvgate-sim", messages });
    const body = r.json as CompletionBody;
    expect(body.usage.completion_tokens).toBe(16);
    expect(body.choices[0]?.finish_reason).toBe("stop");
  });

  it("accepts a request without a model field", async () => {
    const r = await postJson(`${base}/v1/chat/completions`, { messages, max_tokens: 1 });
    expect(r.status).toBe(200);
  });
});

describe("streaming responses", () => {
  it("sends the role first, one event per token, finish_reason last, then usage and [DONE]", async () => {
    const read = await readSse(`${base}/v1/chat/completions`, {
      model: "kvgate-sim",
      messages: [{ role: "user", content: "A prompt no other test sends, so nothing of it is cached." }],
      max_tokens: 4,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(read.status).toBe(200);
    expect(read.contentType).toMatch(/^text\/event-stream/);
    expect(read.ended).toBe("done");
    const data = chunks(read.events);
    expect(data).toHaveLength(1 + 4 + 1);
    expect(data[0]?.choices[0]?.delta?.role).toBe("assistant");
    const content = data.slice(1, 5);
    for (const [i, c] of content.entries()) {
      expect(c.object).toBe("chat.completion.chunk");
      expect(c.choices[0]?.delta?.content).toHaveLength(4);
      expect(c.choices[0]?.finish_reason).toBe(i === 3 ? "length" : null);
    }
    const usage = data[5];
    expect(usage?.choices).toEqual([]);
    expect(usage?.usage).toMatchObject({ completion_tokens: 4, prompt_tokens_details: { cached_tokens: 0 } });
    expect(read.events.at(-1)?.data).toBe("[DONE]");
    // vLLM writes compact JSON; some clients and gateways match on it.
    expect(read.events[1]?.data).toContain('"model":"kvgate-sim"');
  });

  it("omits the usage chunk unless stream_options.include_usage is true", async () => {
    const read = await readSse(`${base}/v1/chat/completions`, { model: "kvgate-sim", messages, max_tokens: 2, stream: true });
    const data = chunks(read.events);
    expect(read.ended).toBe("done");
    expect(data).toHaveLength(3);
    expect(data.some((c) => c.usage !== undefined)).toBe(false);
  });

  it("streams text completions with text deltas", async () => {
    const read = await readSse(`${base}/v1/completions`, {
      model: "kvgate-sim",
      prompt: "Hello",
      max_tokens: 3,
      stream: true,
      stream_options: { include_usage: true },
    });
    const data = chunks(read.events);
    expect(read.ended).toBe("done");
    expect(data.slice(0, 3).map((c) => c.choices[0]?.text?.length)).toEqual([4, 4, 4]);
    expect(data[2]?.choices[0]?.finish_reason).toBe("length");
    expect(data[3]?.usage?.completion_tokens).toBe(3);
  });

  it("streams the same text the non-streaming answer contains", async () => {
    const body = { model: "kvgate-sim", messages, max_tokens: 9 };
    const whole = (await postJson(`${base}/v1/chat/completions`, body)).json as CompletionBody;
    const read = await readSse(`${base}/v1/chat/completions`, { ...body, stream: true });
    const streamed = chunks(read.events)
      .map((c) => c.choices[0]?.delta?.content ?? "")
      .join("");
    expect(streamed).toBe(whole.choices[0]?.message?.content);
  });
});
