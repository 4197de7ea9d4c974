import { randomBytes } from "node:crypto";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { adminFetch, issuedKey } from "./admin-gateway.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * A 200 stream whose first event is the server's error (vLLM's and SGLang's stream generators
 * answer an exception raised after the headers so, then [DONE]) answered nothing, and nothing of
 * it reached the client: it is judged as the same request unstreamed would have been answered. An
 * error the request caused (a 4xx) goes to the client as that HTTP error, which the official SDK
 * raises as its typed error; any other is the backend's failure, and another backend answers. A
 * virtual key is charged for neither, and the failing backend's breaker hears of it. Through the
 * official `openai` SDK, a virtual key with a budget, and the bundled gateway on a real socket.
 */

let upstream: HostileUpstream;
let gw: TestGateway;
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;
/** The failing deployments' bearer key, which their error echoes: it must reach no client. */
const GPU_KEY = `sk-gpu-${randomBytes(12).toString("hex")}`;

const hostile = (behaviour: string, id: string) => ({ id, baseUrl: `${upstream.url}/${behaviour}`, model: "hostile-7b" });
const failing = (behaviour: string) => ({ ...hostile(behaviour, "failing"), apiKeyEnv: "GPU_KEY" });
// Round-robin begins with the first deployment: the failing one is asked first. A breaker that
// opens late: each test reads the failure it caused.
const beside = (name: string, behaviour: string, healthy: string) => ({ name, strategy: "round-robin" as const, breaker: { consecutiveFailures: 1000, minRequests: 1000 }, deployments: [failing(behaviour), hostile(healthy, "healthy")] });

beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway(
    {
      modelGroups: [
        // The healthy stream reports its usage (3 prompt, 2 completion tokens): a charge of exactly that is its alone.
        beside("engine-failed", "error-event-first:vllm-500", "usage-then-done:10"),
        beside("request-refused", "error-event-first:sglang-400", "usage-then-done:10"),
        // llama.cpp's `error:` field, no data line, then [DONE].
        beside("llamacpp-refused", "error-field-first", "usage-then-done:10"),
        // The same, 3 bytes an HTTP chunk: its first chunk ends before the field's name does.
        beside("llamacpp-refused-rechunked", "error-field-first:3", "usage-then-done:10"),
        // Its healthy backend's stream reports 5 input and 1 output tokens.
        beside("responses-failed", "error-event-first:responses", "responses-sglang"),
        { name: "healthy", deployments: [hostile("usage-then-done:10", "healthy")] },
      ],
    },
    { KVGATE_ADMIN_KEY: adminKey, GPU_KEY },
  );
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

interface Charged {
  prompt_tokens: number;
  completion_tokens: number;
  requests: number;
}

/** What the key `id` was charged, once it was charged `requests` requests or more. */
async function charged(id: string, requests: number): Promise<Charged> {
  const read = async () => (await (await adminFetch(gw.url, adminKey, "GET", `/usage?key=${id}`)).json()) as Charged;
  await vi.waitFor(async () => expect((await read()).requests).toBeGreaterThanOrEqual(requests), EVENTUALLY);
  const { prompt_tokens, completion_tokens, requests: n } = await read();
  return { prompt_tokens, completion_tokens, requests: n };
}

const failedCounts = async (group: string) => Object.fromEntries((await gw.status(group)).backends.map((b) => [b.id, b.failed]));

/** A virtual key with a budget (a key that counts tokens), and the official SDK with it. */
async function budgetedClient(): Promise<{ id: string; sdk: OpenAI }> {
  const { id, key } = await issuedKey(gw.url, adminKey, { budget_tokens: 100_000, budget_period: "day" });
  return { id, sdk: new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: key, maxRetries: 0 }) };
}

/** A chat stream through `sdk`: its text, or the error it raised, and the attempts it took. */
async function chatStream(sdk: OpenAI, model: string): Promise<{ text: string; error: string | null; attempts: string | null }> {
  let text = "";
  let attempts: string | null = null;
  try {
    const { data, response } = await sdk.chat.completions.create({ model, messages: [{ role: "user", content: "hello" }], stream: true }).withResponse();
    attempts = response.headers.get("x-kvgate-attempts");
    for await (const chunk of data) text += chunk.choices[0]?.delta.content ?? "";
    return { text, error: null, attempts };
  } catch (e) {
    return { text, error: e instanceof Error ? `${e.constructor.name} ${(e as { status?: number }).status ?? "-"}: ${e.message}` : String(e), attempts };
  }
}

describe("a stream whose first event is its server's error", () => {
  it("that says the server failed (vLLM's 500): another backend answers, the key is charged that answer alone, and the failing backend's breaker counts a failure", async () => {
    const { id, sdk } = await budgetedClient();
    expect(await chatStream(sdk, "engine-failed")).toEqual({ text: "ok", error: null, attempts: "2" });
    expect(await charged(id, 1)).toEqual({ prompt_tokens: 3, completion_tokens: 2, requests: 1 });
    await vi.waitFor(async () => expect(await failedCounts("engine-failed")).toEqual({ failing: 1, healthy: 0 }), EVENTUALLY);
  });

  it("that says the request is bad (SGLang's 400): the SDK raises its BadRequestError with the server's message, secrets taken out; not retried, not charged, no failure counted", async () => {
    const { id, sdk } = await budgetedClient();
    const asked = upstream.stats("usage-then-done").requests;
    const refused = await sdk.chat.completions.create({ model: "request-refused", messages: [{ role: "user", content: "hello" }], stream: true }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
    const error = refused as InstanceType<typeof OpenAI.BadRequestError>;
    expect([error.status, error.type]).toEqual([400, "BadRequestError"]);
    expect(error.message).toContain("exceeds the model's maximum context length");
    expect(error.message).not.toContain(GPU_KEY);
    expect(upstream.stats("usage-then-done").requests).toBe(asked);
    // The next request, to a healthy group, is the key's first charge: the refused one cost nothing.
    expect(await chatStream(sdk, "healthy")).toEqual({ text: "ok", error: null, attempts: "1" });
    expect(await charged(id, 1)).toEqual({ prompt_tokens: 3, completion_tokens: 2, requests: 1 });
    expect(await failedCounts("request-refused")).toEqual({ failing: 0, healthy: 0 });
  });

  it.each(["llamacpp-refused", "llamacpp-refused-rechunked"])("that llama.cpp writes as an SSE `error:` field (a prompt past its context; %s): the SDK raises its BadRequestError 400 with llama.cpp's type and counts, not an empty completion; not retried, not charged, no failure counted", async (group) => {
    const { id, sdk } = await budgetedClient();
    const asked = upstream.stats("usage-then-done").requests;
    const raised = await sdk.chat.completions.create({ model: group, messages: [{ role: "user", content: "hello" }], stream: true }).then(
      async (chunks) => {
        let n = 0;
        for await (const _ of chunks) n++;
        return `a stream of ${n} chunks and no error`;
      },
      (e: unknown) => e,
    );
    expect(raised).toBeInstanceOf(OpenAI.BadRequestError);
    const error = raised as InstanceType<typeof OpenAI.BadRequestError>;
    expect([error.status, error.message]).toEqual([400, expect.stringContaining("exceeds the available context size")]);
    expect(error.error).toMatchObject({ type: "exceed_context_size_error", n_prompt_tokens: 5000, n_ctx: 4096 });
    expect(upstream.stats("usage-then-done").requests).toBe(asked);
    // The next request, to a healthy group, is the key's first charge: the refused ones cost nothing (no estimate).
    expect(await chatStream(sdk, "healthy")).toEqual({ text: "ok", error: null, attempts: "1" });
    expect(await charged(id, 1)).toEqual({ prompt_tokens: 3, completion_tokens: 2, requests: 1 });
    expect(await failedCounts(group)).toEqual({ failing: 0, healthy: 0 });
  });

  it("a Responses API stream whose first event after its openings is the API's error event: another backend answers, charged alone", async () => {
    const { id, sdk } = await budgetedClient();
    const { data, response } = await sdk.responses.create({ model: "responses-failed", input: "hello", stream: true }).withResponse();
    let text = "";
    for await (const event of data) if (event.type === "response.output_text.delta") text += event.delta;
    expect([text, response.headers.get("x-kvgate-attempts")]).toEqual(["ok", "2"]);
    expect(await charged(id, 1)).toEqual({ prompt_tokens: 5, completion_tokens: 1, requests: 1 });
    await vi.waitFor(async () => expect(await failedCounts("responses-failed")).toEqual({ failing: 1, healthy: 0 }), EVENTUALLY);
  });
});
