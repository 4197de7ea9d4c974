import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
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
