import { env, exports } from "cloudflare:workers";
import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { conversation, expectIdle } from "./gateway.ts";

// The official SDK, pointed at the gateway Worker; its fetch goes into the Workers runtime.
const client = new OpenAI({
  apiKey: env.KVGATE_MASTER_KEY,
  baseURL: "https://kvgate.test/v1",
  fetch: (input, init) => exports.default.fetch(new Request(input as RequestInfo, init as RequestInit)),
  maxRetries: 0,
});

describe("the official openai SDK as the client", () => {
  it("non-streamed chat completion, with the routing headers", async () => {
    const { data, response } = await client.chat.completions.create({ model: "sdk", messages: conversation("sdk-a"), max_tokens: 5 }).withResponse();
    expect(data.object).toBe("chat.completion");
    expect(data.model).toBe("sdk");
    expect(data.choices[0]?.message.content?.length).toBeGreaterThan(0);
    expect(data.usage?.completion_tokens).toBe(5);
    for (const h of ["x-kvgate-backend", "x-kvgate-reason", "x-kvgate-prefix-blocks", "x-kvgate-overhead-ms", "x-request-id"]) {
      expect(response.headers.get(h), h).toBeTruthy();
    }
  });

  it("streamed chat completion with usage in the last chunk", async () => {
    const stream = await client.chat.completions.create({
      model: "sdk",
      messages: conversation("sdk-b"),
      max_tokens: 6,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    let usage: OpenAI.CompletionUsage | null | undefined;
    const models = new Set<string>();
    for await (const chunk of stream) {
      models.add(chunk.model);
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text.length).toBeGreaterThan(0);
    expect([...models]).toEqual(["sdk"]);
    expect(usage?.completion_tokens).toBe(6);
    expect(usage?.prompt_tokens).toBeGreaterThan(0);
    await expectIdle("sdk");
  });

  it("legacy completions, streamed and not", async () => {
    const plain = await client.completions.create({ model: "sdk", prompt: "Once upon a time", max_tokens: 3 });
    expect(plain.choices[0]?.text.length).toBeGreaterThan(0);
    const stream = await client.completions.create({ model: "sdk", prompt: "Once upon a time", max_tokens: 3, stream: true });
    let n = 0;
    for await (const chunk of stream) if (chunk.choices[0]?.text) n++;
    expect(n).toBe(3);
  });

  it("surfaces gateway errors as the SDK's typed errors", async () => {
    await expect(client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const bad = new OpenAI({ apiKey: "sk-wrong", baseURL: "https://kvgate.test/v1", fetch: (i, init) => exports.default.fetch(new Request(i as RequestInfo, init as RequestInit)), maxRetries: 0 });
    await expect(bad.models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
  });

  it("lists models", async () => {
    const ids: string[] = [];
    for await (const m of client.models.list()) ids.push(m.id);
    expect(ids).toContain("sdk");
  });
});
