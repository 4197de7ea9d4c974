import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import type { Env } from "../../workers/env.ts";
import worker from "../../workers/gateway/index.ts";
import { tenants } from "./tenants.ts";

/**
 * A virtual key limited to some models must learn nothing of the others (README, Managing keys):
 * a model the gateway serves but the key may not use is answered as one that does not exist, and
 * by the same path. A model the isolate does not know costs a read of the fleet registry (at most
 * once a second); were a known one refused without it, the read's round trip would tell a key,
 * guess by guess, which names exist. Reads are counted through the registry's binding (the real
 * registry behind it), not timed.
 */

let registryReads = 0;
const countingRegistry = {
  getByName: (name: string) => {
    const real = env.FLEET.getByName(name);
    return { snapshot: () => (registryReads++, real.snapshot()), records: () => real.records(), command: (cmd: Parameters<typeof real.command>[0]) => real.command(cmd) };
  },
};

async function send(key: string, path: string, init: RequestInit = {}): Promise<{ status: number; code: string | undefined; reads: number }> {
  // Past the once-a-second bound on reading the registry again for a model the isolate does not know.
  await new Promise((r) => setTimeout(r, 1100));
  registryReads = 0;
  const ctx = createExecutionContext();
  const headers = new Headers(init.headers);
  headers.set("authorization", `Bearer ${key}`);
  const res = await worker.fetch(new Request(`https://kvgate.test${path}`, { ...init, headers }), { ...env, FLEET: countingRegistry } as unknown as Env, ctx);
  await waitOnExecutionContext(ctx);
  const text = await res.text();
  const code = res.headers.get("content-type")?.includes("json") ? (JSON.parse(text) as { error?: { code?: string } }).error?.code : undefined;
  return { status: res.status, code, reads: registryReads };
}

const chat = (model: string): RequestInit => ({ method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens: 2 }) });
const handshake: RequestInit = { headers: { upgrade: "websocket", "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==", "sec-websocket-version": "13" } };

describe("a key limited to some models, naming one outside its list", () => {
  it("is refused by the same path whether the model exists or not: the same 404 after the same registry reads", async () => {
    const made = await tenants().create({ name: "cheap only", models: ["routing"] });
    if (!made.ok) throw new Error(made.message);
    const key = made.value.key;
    // The isolate reads its fleet and the key with a first request the key may make.
    const warm = await send(key, "/v1/models/routing");
    expect(warm.status).toBe(200);
    // Once the isolate knows the fleet, a request for a model the key may call costs no read, nor
    // does the master key's for any model it serves: only a refusal is looked up afresh. (A look-up
    // of one model, GET /v1/models/{id}, reads the fleet as the list does, at most once a second,
    // whatever it finds.)
    const permitted = await send(key, "/v1/chat/completions", chat("routing"));
    const master = await send(env.KVGATE_MASTER_KEY, "/v1/chat/completions", chat("fallback-target"));
    expect({ permitted, master }).toEqual({ permitted: { status: 200, code: undefined, reads: 0 }, master: { status: 200, code: undefined, reads: 0 } });

    const probes: [string, (model: string) => [string, RequestInit?]][] = [
      ["GET /v1/models/{id}", (m) => [`/v1/models/${m}`]],
      ["POST /v1/chat/completions", (m) => ["/v1/chat/completions", chat(m)]],
      ["GET /v1/realtime", (m) => [`/v1/realtime?model=${m}`, handshake]],
    ];
    const seen = [];
    for (const [what, request] of probes) {
      seen.push({ what, exists: await send(key, ...request("fallback-target")), missing: await send(key, ...request("no-such-model")) });
    }
    const refused = { status: 404, code: "model_not_found", reads: 1 };
    expect(seen).toEqual(probes.map(([what]) => ({ what, exists: refused, missing: refused })));
  }, 30_000);
});
