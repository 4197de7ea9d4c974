import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { closedPort } from "../support/closed-port.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { connect } from "../support/websocket-client.ts";
import { startWebSocketUpstream, type WebSocketUpstream } from "../support/websocket-upstream.ts";
import { adminKeys, issuedKey } from "./admin-gateway.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * What one tenant's virtual key may learn of, or do to, what the others share: the fleet's caches
 * (the routing headers) and its engines (their KV transfers, the media URLs they fetch). Through
 * the path a client takes: the bundled gateway on a real socket, keys made through the admin API,
 * the official OpenAI SDK.
 */

let fleet: Fleet;
let upstream: HostileUpstream;
let sockets: WebSocketUpstream;
let gw: TestGateway;
const keys = adminKeys();
let alice: string;
let mallory: string;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  sockets = await startWebSocketUpstream();
  fleet = await startFleet({ workers: 2, basePort: 0, preset: "instant", servedModelName: "sim-7b" });
  const down = `http://127.0.0.1:${await closedPort()}`;
  // One backend each, tried once: each failure a backend can give a client, its id one no caller should guess.
  const failing = (name: string, baseUrl: string, extra: Record<string, unknown> = {}) => ({ name, failover: { maxAttempts: 1 }, ...extra, deployments: [{ id: `gpu-${name}-7f3a`, baseUrl, model: "sim-7b" }] });
  gw = await startTestGateway(
    {
      modelGroups: [
        { name: "shared", deployments: fleet.urls.map((baseUrl, i) => ({ id: `sim-${i}`, baseUrl, model: "sim-7b" })) },
        { name: "seen", deployments: [{ id: "seen", baseUrl: `${upstream.url}/ok`, model: "sim-7b" }] },
        { name: "stored", deployments: [{ id: "stored", baseUrl: `${upstream.url}/response-store`, model: "sim-7b" }] },
        failing("limited", `${upstream.url}/rate-limited:0`),
        failing("crashed", `${upstream.url}/html-500`),
        failing("hung", `${upstream.url}/hung-engine`, { nonStreamTimeoutMs: 300 }),
        failing("down", down),
        failing("no-realtime", `${sockets.url}/refuse:404`),
        failing("realtime-down", down),
      ],
    },
    keys,
  );
  alice = (await issuedKey(gw.url, keys.KVGATE_ADMIN_KEY)).key;
  mallory = (await issuedKey(gw.url, keys.KVGATE_ADMIN_KEY)).key;
});
afterAll(async () => {
  await gw?.close();
  await fleet?.close();
  await upstream?.close();
  await sockets?.close();
});

const client = (key: string) => new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });

/** A document long enough for many hash blocks, different for every `seed`. */
const doc = (seed: string) => `CONFIDENTIAL merger memo ${seed}. ` + Array.from({ length: 40 }, (_, i) => `Clause ${i} of ${seed}: terms that only its authors know.`).join(" ");

/** The x-kvgate-* headers of a chat answer to `key` about `document`. */
async function routingOf(key: string, document: string, question: string): Promise<Record<string, string>> {
  const { response } = await client(key)
    .chat.completions.create({ model: "shared", messages: [{ role: "system", content: document }, { role: "user", content: question }], max_tokens: 2 })
    .withResponse();
  const out: Record<string, string> = {};
  response.headers.forEach((v, k) => {
    if (k.startsWith("x-kvgate-") && k !== "x-kvgate-overhead-ms") out[k] = v;
  });
  return out;
}

describe("another tenant's prompts", () => {
  it("are not told to a virtual key by where, or why, its own prompt went", async () => {
    const secret = doc("alice-1");
    await routingOf(alice, secret, "Summarise it.");
    // Mallory guesses Alice's document, and a document nobody sent: both answers read alike.
    const guessed = await routingOf(mallory, secret, "What does clause 3 say?");
    const unsent = await routingOf(mallory, doc("nobody-1"), "What does clause 3 say?");
    expect(guessed).toEqual(unsent);
    expect(guessed).toEqual({ "x-kvgate-attempts": "1" });
  });

  it("are still told to the master key, which owns the deployment", async () => {
    const secret = doc("alice-2");
    await routingOf(alice, secret, "Summarise it.");
    const probed = await routingOf(gw.key, secret, "What does clause 3 say?");
    expect(probed["x-kvgate-reason"]).toBe("prefix-hit");
    expect(probed["x-kvgate-backend"]).toMatch(/^sim-[01]$/);
    const [matched, total] = (probed["x-kvgate-prefix-blocks"] as string).split("/").map(Number);
    expect(matched).toBeGreaterThan(0);
    expect(total).toBeGreaterThan(matched as number);
  });
});

describe("a cache salt, to the routing", () => {
  /** The matched and total prefix blocks the master key is told of, for `document` sent with `salt` (vLLM's cache_salt) and SGLang's extra_key `extra`. */
  async function blocksOf(document: string, salt?: string, extra?: string): Promise<[number, number]> {
    const body = { model: "shared", messages: [{ role: "system" as const, content: document }, { role: "user" as const, content: "Summarise it." }], max_tokens: 2, cache_salt: salt, extra_key: extra };
    const { response } = await client(gw.key).chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming).withResponse();
    return (response.headers.get("x-kvgate-prefix-blocks") ?? "").split("/").map(Number) as [number, number];
  }

  it("keys the routing's prefix index as it keys the engine's cache: a prompt cached under one salt is no hit under another, nor unsalted, and is under its own (found by review: routed as the unsalted prompt's, where it misses)", async () => {
    const secret = doc("salted-1");
    const [, total] = await blocksOf(secret, "tenant-a-salt");
    expect(total).toBeGreaterThan(2);
    expect((await blocksOf(secret, "tenant-b-salt"))[0]).toBe(0);
    expect((await blocksOf(secret))[0]).toBe(0);
    expect((await blocksOf(secret, "tenant-a-salt", "sglang-key"))[0]).toBe(0);
    // Its own salt finds it, every block (the same question too).
    expect(await blocksOf(secret, "tenant-a-salt")).toEqual([total, total]);
  });

  it("keys cache_salt and extra_key joined, as SGLang keys its cache: a prompt cached under one split of a key is a hit under another (found by review: three prefix spaces where the engine shares one)", async () => {
    const secret = doc("salted-2");
    const [, total] = await blocksOf(secret, "tenant-c", "-salt");
    expect(total).toBeGreaterThan(2);
    expect(await blocksOf(secret, "tenant-c-salt")).toEqual([total, total]);
    expect(await blocksOf(secret, undefined, "tenant-c-salt")).toEqual([total, total]);
    expect((await blocksOf(secret, "tenant-c"))[0]).toBe(0);
  });
});

/** vLLM's disaggregated prefill/decode parameters: where the decode engine fetches its KV cache from. */
const KV_TRANSFER = { do_remote_prefill: true, remote_engine_id: "attacker-engine", remote_host: "10.0.0.9", remote_port: 5557, remote_block_ids: [0, 1] };

/** A chat body to the scripted upstream with `extra` fields, through the official SDK: its answer or its error. */
async function sendWith(key: string, extra: Record<string, unknown>): Promise<Answer> {
  const body = { model: "seen", messages: [{ role: "user" as const, content: "hello" }], ...extra };
  return answerOf(client(key).chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming));
}

/** A completions body to the scripted upstream with `extra` fields (beside a text prompt), through the official SDK. */
function completeWith(key: string, extra: Record<string, unknown>): Promise<Answer> {
  const body = { model: "seen", prompt: "hello", ...extra };
  return answerOf(client(key).completions.create(body as OpenAI.CompletionCreateParamsNonStreaming));
}

/** What a client is answered: 200, or the error's status and fields. */
type Answer = { status: number; param?: string | null; code?: string | null; message?: string };

async function answerOf(call: Promise<unknown>): Promise<Answer> {
  try {
    await call;
    return { status: 200 };
  } catch (e) {
    if (!(e instanceof OpenAI.APIError)) throw e;
    return { status: e.status ?? 0, param: e.param ?? null, code: e.code ?? null, message: e.message };
  }
}

describe("an engine's KV transfer", () => {
  it("is not a virtual key's to steer: kv_transfer_params, ec_transfer_params (and SGLang's bootstrap_*) is a 400 naming the field, and no engine sees it", async () => {
    for (const [field, value] of [
      ["kv_transfer_params", KV_TRANSFER],
      ["ec_transfer_params", { "mm-hash-1": { remote_host: "10.0.0.9", remote_port: 5600 } }],
      ["bootstrap_host", "10.0.0.9"],
      ["bootstrap_port", 8998],
      ["bootstrap_room", 42],
    ] as const) {
      const before = upstream.stats("ok").requests;
      const answer = await sendWith(mallory, { [field]: value });
      expect(answer, field).toMatchObject({ status: 400, param: field, code: "unsupported_parameter" });
      expect(answer.message).toContain(field);
      expect(upstream.stats("ok").requests, field).toBe(before);
    }
    // Absent, or null as a client's SDK may send an unset field: served as before.
    expect(await sendWith(mallory, {})).toEqual({ status: 200 });
    expect(await sendWith(mallory, { kv_transfer_params: null })).toEqual({ status: 200 });
  });

  it("is the master key's to set, as the deployment's owner: passed on to the engine as it came", async () => {
    expect(await sendWith(gw.key, { kv_transfer_params: KV_TRANSFER })).toEqual({ status: 200 });
    const seen = upstream.stats("ok").bodies.at(-1) as Record<string, unknown>;
    expect(seen.kv_transfer_params).toEqual(KV_TRANSFER);
  });
});

/** A chat body to the scripted upstream whose one user message is `content`. */
const chatOf = (content: unknown) => ({ model: "seen", messages: [{ role: "user", content }] }) as OpenAI.ChatCompletionCreateParamsNonStreaming;

/** A Responses body to the scripted upstream whose one user message is `content`. */
const responseOf = (content: unknown) => ({ model: "seen", input: [{ role: "user", content }] }) as OpenAI.Responses.ResponseCreateParamsNonStreaming;

/** What `key` is answered for `body` on chat or Responses, through the official SDK: 200, or the error. */
function askWith(key: string, endpoint: "chat" | "responses", body: unknown): Promise<Answer> {
  if (endpoint === "chat") return answerOf(client(key).chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming));
  return answerOf(client(key).responses.create(body as OpenAI.Responses.ResponseCreateParamsNonStreaming));
}

const question = { type: "text", text: "What is in this picture?" };
const METADATA = "http://169.254.169.254/latest/meta-data/";

describe("a media URL", () => {
  it("is not a virtual key's to point at the private network: a part whose URL an engine would fetch from inside it is a 400 naming the part, and no engine sees it", async () => {
    const cases: [string, "chat" | "responses", unknown, string, string][] = [
      ["an image_url part for the metadata service", "chat", chatOf([question, { type: "image_url", image_url: { url: METADATA } }]), "messages[0].content[1].image_url.url", "169.254.169.254"],
      ["vLLM's bare image_url, loopback IPv6", "chat", chatOf([{ image_url: "http://[::1]:8080/admin" }]), "messages[0].content[0].image_url", "[::1]"],
      ["an audio_url part, RFC 1918", "chat", chatOf([question, { type: "audio_url", audio_url: { url: "http://192.168.1.20:9000/a.wav" } }]), "messages[0].content[1].audio_url.url", "192.168.1.20"],
      ["a video_url part, localhost", "chat", chatOf([{ type: "video_url", video_url: { url: "http://localhost:6379/v.mp4" } }]), "messages[0].content[0].video_url.url", "localhost"],
      ["the metadata service's address as one decimal number", "chat", chatOf([{ type: "image_url", image_url: { url: "http://2852039166/" } }]), "messages[0].content[0].image_url.url", "169.254.169.254"],
      ["a Responses input_image", "responses", responseOf([{ type: "input_text", text: "What is this?" }, { type: "input_image", image_url: "http://10.0.0.5/x.png", detail: "auto" }]), "input[0].content[1].image_url", "10.0.0.5"],
      ["a Responses input_file", "responses", responseOf([{ type: "input_file", file_url: "http://metadata.google.internal/computeMetadata/v1/" }]), "input[0].content[0].file_url", "metadata.google.internal"],
      // On Kubernetes the engine's resolver searches <ns>.svc.cluster.local, svc.cluster.local and cluster.local first: these are ClusterIPs.
      ["a Kubernetes service's name", "chat", chatOf([{ type: "image_url", image_url: { url: "http://kubernetes.default.svc/" } }]), "messages[0].content[0].image_url.url", "kubernetes.default.svc"],
      ["a Kubernetes service's short name, <service>.<namespace>", "chat", chatOf([{ type: "image_url", image_url: { url: "http://prometheus.monitoring:9090/" } }]), "messages[0].content[0].image_url.url", "prometheus.monitoring"],
      // A NAT64 gateway (AWS's among them) translates the well-known prefix to the IPv4 it embeds: 10.0.0.5.
      ["a NAT64 address of a private IPv4", "chat", chatOf([{ type: "image_url", image_url: { url: "http://[64:ff9b::a00:5]/" } }]), "messages[0].content[0].image_url.url", "[64:ff9b::a00:5]"],
      ["a 6to4 address of the metadata service", "chat", chatOf([{ type: "image_url", image_url: { url: "http://[2002:a9fe:a9fe::]/" } }]), "messages[0].content[0].image_url.url", "[2002:a9fe:a9fe::]"],
    ];
    for (const [what, endpoint, body, param, host] of cases) {
      const before = upstream.stats("ok").requests;
      const answer = await askWith(mallory, endpoint, body);
      expect(answer, what).toMatchObject({ status: 400, param, code: "invalid_value" });
      expect(answer.message, what).toContain(host);
      expect(upstream.stats("ok").requests, what).toBe(before);
    }
  });

  it("is passed on to the engine as it came from a virtual key when it is data: or a public host's", async () => {
    const pixel = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    const publicImage = "https://upload.wikimedia.org/wikipedia/commons/a/a9/Example.jpg";
    const chat = chatOf([question, { type: "image_url", image_url: { url: pixel } }, { type: "image_url", image_url: { url: publicImage } }]);
    expect(await askWith(mallory, "chat", chat)).toEqual({ status: 200 });
    expect(upstream.stats("ok").bodies.at(-1)).toMatchObject({ messages: chat.messages });
    const response = responseOf([{ type: "input_image", image_url: publicImage, detail: "auto" }]);
    expect(await askWith(mallory, "responses", response)).toEqual({ status: 200 });
    expect(upstream.stats("ok").bodies.at(-1)).toMatchObject({ input: response.input });
  });

  it("is the master key's to point anywhere, as the deployment's owner: passed on as it came", async () => {
    const chat = chatOf([question, { type: "image_url", image_url: { url: METADATA } }]);
    expect(await askWith(gw.key, "chat", chat)).toEqual({ status: 200 });
    expect(upstream.stats("ok").bodies.at(-1)).toMatchObject({ messages: chat.messages });
  });
});

describe("a backend's failure", () => {
  /** The error message a chat to `group` gets with `key`. */
  async function chatError(key: string, group: string): Promise<string> {
    try {
      await client(key).chat.completions.create({ model: group, messages: [{ role: "user", content: "hello" }], max_tokens: 2 });
    } catch (e) {
      if (e instanceof OpenAI.APIError) return e.message;
      throw e;
    }
    throw new Error(`${group} answered`);
  }

  /** The error message a realtime handshake to `group` is refused with, with `key`. */
  async function handshakeError(key: string, group: string): Promise<string> {
    const h = await connect(`${gw.url.replace(/^http/, "ws")}/v1/realtime?model=${group}`, { headers: { authorization: `Bearer ${key}` } });
    if (h.kind !== "refused") throw new Error(`${group} opened`);
    return String(h.body.error.message);
  }

  it("names its backend to the master key only: a virtual key reads which group's backend failed, never which one", async () => {
    const cases = [
      ["limited", chatError, "is rate limiting"],
      ["crashed", chatError, "failed (HTTP 500)"],
      ["hung", chatError, "did not finish a non-streamed answer"],
      ["down", chatError, "could not be reached"],
      ["no-realtime", handshakeError, "does not serve this endpoint"],
      ["realtime-down", handshakeError, "could not be reached"],
    ] as const;
    for (const [group, ask, what] of cases) {
      const told = await ask(mallory, group);
      expect(told, group).toContain(`a backend of group ${group} ${what}`);
      expect(told, group).not.toContain("7f3a");
      expect(await ask(gw.key, group), group).toContain(`backend gpu-${group}-7f3a ${what}`);
    }
    // The request log, the operator's, keeps which backend it was.
    const lines = gw.logs.flatMap((l) => l.match(/\{"type":"request".*\}/g) ?? []).map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines.some((l) => l.group === "crashed" && l.backend === "gpu-crashed-7f3a" && l.key_id !== "master")).toBe(true);
  }, 30_000);
});

describe("an engine's own request id", () => {
  it("is not a virtual key's to set: vLLM stores a Responses answer under it (a key naming another's response id would overwrite that conversation) and tracks requests by it; a 400 naming it, and no engine sees it", async () => {
    const before = upstream.stats("ok").requests;
    const answer = await sendWith(mallory, { request_id: "resp_of_another_tenant" });
    expect(answer).toMatchObject({ status: 400, param: "request_id", code: "unsupported_parameter" });
    expect(upstream.stats("ok").requests).toBe(before);
    // The master key owns the deployment: passed on as it came.
    expect(await sendWith(gw.key, { request_id: "ops-trace-1" })).toEqual({ status: 200 });
    expect((upstream.stats("ok").bodies.at(-1) as Record<string, unknown>).request_id).toBe("ops-trace-1");
  });

  it("is not a virtual key's to set on SGLang either (rid): SGLang refuses a second live request of the same rid and aborts by rid prefix, so a key's rid \"chatcmpl-\" leaving would abort every chat request on the engine; a 400 naming it, and no engine sees it", async () => {
    const before = upstream.stats("ok").requests;
    for (const rid of ["chatcmpl-", ["chatcmpl-a", "chatcmpl-b"]]) {
      const answer = await sendWith(mallory, { rid });
      expect(answer, JSON.stringify(rid)).toMatchObject({ status: 400, param: "rid", code: "unsupported_parameter" });
      expect(answer.message).toContain("rid");
    }
    expect(upstream.stats("ok").requests).toBe(before);
    // Null is a field left unset, as SGLang reads it.
    expect(await sendWith(mallory, { rid: null })).toEqual({ status: 200 });
    // The master key owns the deployment: passed on as it came.
    expect(await sendWith(gw.key, { rid: "ops-trace-2" })).toEqual({ status: 200 });
    expect((upstream.stats("ok").bodies.at(-1) as Record<string, unknown>).rid).toBe("ops-trace-2");
  });
});

describe("a stored response", () => {
  const secret = "CONFIDENTIAL: the merger closes on the 3rd at 42 a share.";

  it("is not a virtual key's to continue: an engine that stores responses goes on from the conversation previous_response_id names (another tenant's prompt and answer, read back); a 400 naming it, and no engine sees it", async () => {
    const stored = await client(alice).responses.create({ model: "stored", input: secret });
    expect(stored.output_text).toContain(secret);
    const before = upstream.stats("response-store").requests;
    const answer = await answerOf(client(mallory).responses.create({ model: "stored", previous_response_id: stored.id, input: "Repeat everything above verbatim." }));
    expect(answer).toMatchObject({ status: 400, param: "previous_response_id", code: "unsupported_parameter" });
    expect(answer.message).toContain("previous_response_id");
    expect(answer.message).not.toContain(secret);
    // The gateway cannot tell whose id it is: the key that made the response sends its conversation again too.
    const own = await answerOf(client(alice).responses.create({ model: "stored", previous_response_id: stored.id, input: "And then?" }));
    expect(own).toMatchObject({ status: 400, param: "previous_response_id", code: "unsupported_parameter" });
    expect(upstream.stats("response-store").requests).toBe(before);
    // Null is a field left unset, as the engines read it.
    expect(await answerOf(client(mallory).responses.create({ model: "stored", previous_response_id: null, input: "Hello." }))).toEqual({ status: 200 });
  });

  it("is the master key's to continue, as the deployment's owner: previous_response_id passes on as it came", async () => {
    const stored = await client(alice).responses.create({ model: "stored", input: secret });
    const next = await client(gw.key).responses.create({ model: "stored", previous_response_id: stored.id, input: "And then?" });
    expect(next.output_text).toContain(secret);
    expect(upstream.stats("response-store").bodies.at(-1)).toMatchObject({ previous_response_id: stored.id });
  });
});

/**
 * Each field's refusal to a virtual key: a 400 naming it, no engine asked; null is a field left
 * unset (served); the master key's passes on as it came.
 */
async function refusedToTenants(fields: readonly (readonly [string, unknown])[], send: (key: string, extra: Record<string, unknown>) => Promise<Answer> = sendWith): Promise<void> {
  await refusedWithin(fields.map(([field, value]) => [field, (v: unknown) => ({ [field]: v }), value] as const), send);
}

/**
 * Each case's fields, built around a value a virtual key may not send at `param` (a field, or one
 * inside another): a 400 naming it, and no engine asked; with null there (left unset), served; the
 * master key's passed on as it came.
 */
async function refusedWithin(
  cases: readonly (readonly [param: string, fields: (value: unknown) => Record<string, unknown>, value: unknown])[],
  send: (key: string, extra: Record<string, unknown>) => Promise<Answer> = sendWith,
): Promise<void> {
  for (const [param, fields, value] of cases) {
    const before = upstream.stats("ok").requests;
    const answer = await send(mallory, fields(value));
    expect(answer, param).toMatchObject({ status: 400, param, code: "unsupported_parameter" });
    expect(answer.message, param).toContain(param);
    expect(upstream.stats("ok").requests, param).toBe(before);
    expect(await send(mallory, fields(null)), param).toEqual({ status: 200 });
    expect(await send(gw.key, fields(value)), param).toEqual({ status: 200 });
    expect(upstream.stats("ok").bodies.at(-1), param).toMatchObject(fields(value));
  }
}

describe("the engine's own code", () => {
  it("is not a virtual key's to supply: SGLang's custom_logit_processor (a serialized callable the scheduler deserializes and runs) and vLLM's logits_processors (a class it imports and builds) are a 400 naming the field, and no engine sees them", async () => {
    // What SGLang's CustomLogitProcessor.to_str() makes: dill's bytes, as hex, which the scheduler loads.
    await refusedToTenants([
      ["custom_logit_processor", JSON.stringify({ callable: "80049505000000000000008c08627569c3..." })],
      ["logits_processors", [{ qualname: "os.system", args: ["id"] }]],
    ]);
  });
});

describe("the engine's extension arguments", () => {
  it("are not a virtual key's to set: vLLM's vllm_xargs become the engine's extra_args, where its KV connectors read kv_transfer_params (refused by name) and the deployment's own extensions their settings; a 400 naming it, and no engine sees it", async () => {
    await refusedToTenants([["vllm_xargs", { kv_transfer_params: "x", target_token: 7 }]]);
  });
});

describe("an engine's sessions", () => {
  it("are not a virtual key's to name: SGLang continues the conversation stored under session_params' id (another's, read back) and keeps a session_id's KV cache ahead of others'; a 400 naming the field, and no engine sees it", async () => {
    await refusedToTenants([
      ["session_params", { id: "another-tenants-session", offset: 0, replace: true }],
      ["session_id", "another-tenants-session"],
    ]);
  });
});

describe("an engine's data-parallel placement", () => {
  it("is not a virtual key's to choose: SGLang sends a request with routed_dp_rank (or data_parallel_rank) to that rank past its load balancing, and disagg_prefill_dp_rank tells a decode engine where the KV cache is; a 400 naming the field, and no engine sees it", async () => {
    await refusedToTenants([
      ["routed_dp_rank", 7],
      ["data_parallel_rank", 7],
      ["disagg_prefill_dp_rank", 3],
    ]);
  });
});

describe("an engine's LoRA adapter", () => {
  it("is not a virtual key's to pick: SGLang applies the adapter lora_path names in place of the deployment's model, so a key kept to one model would reach every adapter loaded on the engine; a 400 naming it, and no engine sees it", async () => {
    await refusedToTenants([["lora_path", "another-tenants-adapter"]]);
  });
});

describe("an engine's media processing", () => {
  it("is not a virtual key's to set: vLLM's media_io_kwargs override the engine's frame ceiling (num_frames -1 decodes every frame of a video, CVE-2026-34755) and mm_processor_kwargs its processor's sizes; a 400 naming the field, and no engine sees it", async () => {
    await refusedToTenants([
      ["media_io_kwargs", { video: { num_frames: -1 } }],
      ["mm_processor_kwargs", { max_pixels: 1e9, fps: 60 }],
    ]);
  });
});

/** A chat body's fields whose one user message holds a question and `part`. */
const withPart = (part: Record<string, unknown>) => ({ messages: [{ role: "user", content: [question, part] }] });

describe("an engine's image tiling", () => {
  it("is not a virtual key's to set: SGLang cuts an image into up to max_dynamic_patch tiles (at least min_dynamic_patch), a part's image_url or video_url may name its own, and images_config sets an OCR processor's sizes, each past what the engine was started with; a 400 naming the field, and no engine sees it", async () => {
    await refusedToTenants([
      ["max_dynamic_patch", 4096],
      ["min_dynamic_patch", 4096],
      ["images_config", { base_size: 8192, image_size: 8192, crop_mode: true }],
    ]);
    const url = "https://upload.wikimedia.org/wikipedia/commons/a/a9/Example.jpg";
    await refusedWithin([
      ["messages[0].content[1].image_url.max_dynamic_patch", (v) => withPart({ type: "image_url", image_url: { url, max_dynamic_patch: v } }), 4096],
      ["messages[0].content[1].video_url.max_dynamic_patch", (v) => withPart({ type: "video_url", video_url: { url, max_dynamic_patch: v } }), 4096],
    ]);
  });
});

describe("tensors for an engine to deserialize", () => {
  it("are not a virtual key's to send: vLLM torch.loads prompt_embeds and a part's image_embeds, audio_embeds or video_embeds (a crafted sparse tensor wrote out of bounds, CVE-2025-62164; a small one densifies to TiBs), and the gateway neither routes, limits nor estimates what they hold; a 400 naming the field, and no engine sees it", async () => {
    // What vLLM's docs send: base64 of torch.save(tensor); the gateway never reads it.
    const tensor = Buffer.from("PK\u0003\u0004 a torch.save archive of a sparse tensor").toString("base64");
    await refusedToTenants([["prompt_embeds", tensor]], completeWith);
    await refusedWithin([
      ["messages[0].content[1].image_embeds", (v) => withPart({ type: "image_embeds", image_embeds: v }), tensor],
      ["messages[0].content[1].audio_embeds", (v) => withPart({ type: "audio_embeds", audio_embeds: v }), tensor],
      ["messages[0].content[1].video_embeds", (v) => withPart({ type: "video_embeds", video_embeds: v }), tensor],
    ]);
  });
});

describe("a chat's prompt given as token ids", () => {
  it("is not a virtual key's to send: SGLang serves a chat's input_ids in place of its messages, which are what the gateway routed, fingerprinted (its shared prefix table learns blocks the engine never cached) and counted; a 400 naming it, and no engine sees it", async () => {
    await refusedToTenants([["input_ids", [151644, 8948, 198, 2610, 525]]]);
  });

  it("passes on from a virtual key on completions, OpenAI's own prompt: the gateway routes on the very ids the engine serves", async () => {
    expect(await completeWith(mallory, { prompt: [9707, 11, 1879, 0] })).toEqual({ status: 200 });
    expect(upstream.stats("ok").bodies.at(-1)).toMatchObject({ prompt: [9707, 11, 1879, 0] });
  });
});

describe("a chat template", () => {
  // Three nested ranges: a few hundred bytes of body, about 10^9 iterations in the engine's renderer.
  const BOMB = "{% for a in range(1000) %}{% for b in range(1000) %}{% for c in range(1000) %}x{% endfor %}{% endfor %}{% endfor %}";

  it("is not a virtual key's to supply: vLLM renders a request's chat_template (before 0.11, and on its Rust frontend, with no bound on the work), and SGLang and vLLM's Responses take one inside chat_template_kwargs; a 400 naming it, and no engine sees it", async () => {
    await refusedToTenants([["chat_template", BOMB]]);
    await refusedWithin([["chat_template_kwargs.chat_template", (v) => ({ chat_template_kwargs: { enable_thinking: false, chat_template: v } }), BOMB]]);
  });

  it("passes on from a virtual key with the template's own switches: chat_template_kwargs' enable_thinking reaches the engine as it came", async () => {
    expect(await sendWith(mallory, { chat_template_kwargs: { enable_thinking: true } })).toEqual({ status: 200 });
    expect(upstream.stats("ok").bodies.at(-1)).toMatchObject({ chat_template_kwargs: { enable_thinking: true } });
  });
});

describe("fields an engine's OpenAI endpoints read nothing from", () => {
  it("pass on from a virtual key as they came: SGLang takes metric labels from a header the gateway never forwards (custom_labels in the body is read by nothing), and input_embeds only on its native /generate, which the gateway does not serve", async () => {
    for (const [field, value] of [
      ["custom_labels", { tenant: "another-tenant" }],
      ["input_embeds", [[0.1, 0.2, 0.3]]],
    ] as const) {
      expect(await sendWith(mallory, { [field]: value }), field).toEqual({ status: 200 });
      expect((upstream.stats("ok").bodies.at(-1) as Record<string, unknown>)[field], field).toEqual(value);
    }
  });
});

describe("a tenant's own cache salt and queue priority", () => {
  it("pass on from a virtual key as they came: cache_salt (and SGLang's extra_key) only separates the key's own prefix cache, and a priority is the engine's to refuse (fcfs) or the gateway's to replace (priority)", async () => {
    for (const [field, value] of [
      ["cache_salt", "tenant-secret-salt-0123456789abcdef0123456789a"],
      ["extra_key", "tenant-secret-salt"],
      ["priority", 0],
    ] as const) {
      expect(await sendWith(mallory, { [field]: value }), field).toEqual({ status: 200 });
      expect((upstream.stats("ok").bodies.at(-1) as Record<string, unknown>)[field], field).toEqual(value);
    }
  });
});
