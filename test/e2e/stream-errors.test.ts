import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as z from "zod/mini";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";
import { ensurePython, runPython } from "./python.ts";

/**
 * A stream whose upstream dies after bytes reached the client ends with an SSE error event that
 * the official SDKs raise as an APIError with code upstream_stream_error — not a silently
 * truncated answer, and not a JSON syntax error from half an event (issue 10 §5).
 */

let upstream: HostileUpstream;
let gw: TestGateway;

const hostile = (behaviour: string) => ({ id: behaviour, baseUrl: `${upstream.url}/${behaviour}`, model: "hostile-7b" });

beforeAll(async () => {
  [upstream] = await Promise.all([startHostileUpstream(), ensurePython()]);
  gw = await startTestGateway({
    modelGroups: [
      // The JavaScript relay path, two ways in: a stall bound, and a hook that rewrites chunks.
      { name: "cut-watched", streamIdleTimeoutMs: 60_000, failover: { maxAttempts: 1 }, deployments: [hostile("cut-mid-event")] },
      { name: "cut-hooked", hooks: ["restamp"], failover: { maxAttempts: 1 }, deployments: [hostile("cut-mid-event")] },
      // The native fast path, cut where an upstream that writes whole events dies: between them.
      { name: "cut-native", failover: { maxAttempts: 1 }, deployments: [hostile("cut-between-events")] },
      // The native fast path cut inside an event: what it cannot see (README, stream errors).
      { name: "cut-native-mid-event", failover: { maxAttempts: 1 }, deployments: [hostile("cut-mid-event")] },
      // A Responses API stream cut, on each path.
      { name: "responses-cut-watched", streamIdleTimeoutMs: 60_000, failover: { maxAttempts: 1 }, deployments: [hostile("responses-cut-between-events")] },
      { name: "responses-cut-native", failover: { maxAttempts: 1 }, deployments: [hostile("responses-cut-between-events")] },
    ],
  });
}, 120_000);
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

interface Outcome {
  content: string;
  error: { class: string; api_error: boolean; code: string | null } | null;
}

async function nodeSdk(model: string): Promise<Outcome> {
  const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
  let content = "";
  try {
    const stream = await client.chat.completions.create({ model, stream: true, messages: [{ role: "user", content: "hello" }] });
    for await (const chunk of stream) content += chunk.choices[0]?.delta.content ?? "";
    return { content, error: null };
  } catch (e) {
    const apiError = e instanceof OpenAI.APIError;
    return { content, error: { class: (e as Error).constructor.name, api_error: apiError, code: apiError ? (e.code ?? null) : null } };
  }
}

describe.each(["cut-watched", "cut-hooked", "cut-native"])("a stream cut by its upstream (%s)", (model) => {
  it("the openai Node SDK raises an APIError with code upstream_stream_error, after the content that came", async () => {
    const out = await nodeSdk(model);
    expect(out.content).toBe("first");
    expect(out.error).toMatchObject({ api_error: true, code: "upstream_stream_error" });
  });

  it("the openai Python SDK does too", async () => {
    const out = await runPython<Outcome>("stream_chat.py", [gw.url, gw.key, model]);
    expect(out.content).toBe("first");
    expect(out.error).toMatchObject({ api_error: true, code: "upstream_stream_error" });
  });
});

describe("a stream cut inside an event on the native fast path, which sees no byte of it (README: stream errors)", () => {
  it("the half event is ended by a blank line before the error event: the openai Node SDK raises its parse error for it, not the APIError", async () => {
    const out = await nodeSdk("cut-native-mid-event");
    expect(out.content).toBe("first");
    expect(out.error).toMatchObject({ class: "SyntaxError", api_error: false });
  });

  it("the openai Python SDK raises its JSONDecodeError for it", async () => {
    const out = await runPython<Outcome>("stream_chat.py", [gw.url, gw.key, "cut-native-mid-event"]);
    expect(out.content).toBe("first");
    expect(out.error).toMatchObject({ class: "JSONDecodeError", api_error: false });
  });

  it("the error event itself still comes, whole, after it", async () => {
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "cut-native-mid-event", stream: true, messages: [{ role: "user", content: "hello" }] }),
    });
    const events = (await res.text()).trimEnd().split("\n\n");
    expect(JSON.parse((events.at(-1) ?? "").replace(/^data: /, ""))).toMatchObject({ error: { code: "upstream_stream_error" } });
    expect(() => JSON.parse((events.at(-2) ?? "").replace(/^data: /, ""))).toThrow(SyntaxError);
  });
});

describe.each(["responses-cut-watched", "responses-cut-native"])("a Responses API stream cut by its upstream (%s)", (model) => {
  const ask = () =>
    fetch(`${gw.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model, stream: true, input: "hello" }),
    });

  it("ends with that API's error event: `event: error`, type, code, message, param and sequence_number, as the Vercel AI SDK reads it, and the error object", async () => {
    const text = await (await ask()).text();
    const last = text.trimEnd().split("\n\n").at(-1) ?? "";
    const [eventLine, dataLine] = last.split("\n");
    expect(eventLine).toBe("event: error");
    const data = JSON.parse((dataLine ?? "").replace(/^data: /, "")) as Record<string, unknown>;
    expect(data).toMatchObject({ type: "error", code: "upstream_stream_error", param: null, error: { type: "upstream_error", code: "upstream_stream_error" } });
    expect(data.message).toMatch(/^upstream stream failed/);
    // The Vercel AI SDK's error chunk (@ai-sdk/openai, openai-responses-api.ts): a chunk that fails it is a type-validation error, not the gateway's message.
    const vercelErrorChunk = z.object({ type: z.literal("error"), code: z.string(), message: z.string(), param: z.nullish(z.string()), sequence_number: z.number() });
    expect(vercelErrorChunk.safeParse(data).success).toBe(true);
  });

  it("the openai Node SDK raises an APIError with code upstream_stream_error, after the text that came", async () => {
    const client = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: gw.key, maxRetries: 0 });
    let text = "";
    const err = await (async () => {
      const stream = await client.responses.create({ model, stream: true, input: "hello" });
      for await (const event of stream) if (event.type === "response.output_text.delta") text += event.delta;
    })().catch((e: unknown) => e);
    expect(text).toBe("ok");
    if (!(err instanceof OpenAI.APIError)) throw err;
    expect(err.code).toBe("upstream_stream_error");
  });
});
