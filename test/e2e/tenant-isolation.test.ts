import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { adminKeys, issuedKey } from "./admin-gateway.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * What one tenant's virtual key may learn of, or do to, what the others share: the fleet's caches
 * (the routing headers) and its engines (their KV transfers). Through the path a client takes: the
 * bundled gateway on a real socket, keys made through the admin API, the official OpenAI SDK.
 */

let fleet: Fleet;
let upstream: HostileUpstream;
let gw: TestGateway;
const keys = adminKeys();
let alice: string;
let mallory: string;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  fleet = await startFleet({ workers: 2, basePort: 0, preset: "instant", servedModelName: "sim-7b" });
  gw = await startTestGateway(
    {
      modelGroups: [
        { name: "shared", deployments: fleet.urls.map((baseUrl, i) => ({ id: `sim-${i}`, baseUrl, model: "sim-7b" })) },
        { name: "seen", deployments: [{ id: "seen", baseUrl: `${upstream.url}/ok`, model: "sim-7b" }] },
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

/** vLLM's disaggregated prefill/decode parameters: where the decode engine fetches its KV cache from. */
const KV_TRANSFER = { do_remote_prefill: true, remote_engine_id: "attacker-engine", remote_host: "10.0.0.9", remote_port: 5557, remote_block_ids: [0, 1] };

/** A chat body to the scripted upstream with `extra` fields, through the official SDK: its answer or its error. */
async function sendWith(key: string, extra: Record<string, unknown>): Promise<{ status: number; param?: string | null; code?: string | null; message?: string }> {
  const body = { model: "seen", messages: [{ role: "user" as const, content: "hello" }], ...extra };
  try {
    await client(key).chat.completions.create(body as OpenAI.ChatCompletionCreateParamsNonStreaming);
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
