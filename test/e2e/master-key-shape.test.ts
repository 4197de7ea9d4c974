import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { looksLikeVirtualKey, newKey } from "../../src/tenants/key-format.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { adminKeys, issuedKey } from "./admin-gateway.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * A master key shaped like a virtual key (`sk-kvg-` and 40 letters and digits): an operator who
 * gave KVGATE_MASTER_KEY the style of the keys `keys create` prints. It is the master key all the
 * same, and the virtual keys beside it are what they were. Through the bundled gateway on a real
 * socket, keys made through the admin API, the official OpenAI SDK as the client.
 */

const MASTER = newKey();
const keys = adminKeys();
let upstream: HostileUpstream;
let gw: TestGateway;

beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway({ modelGroups: [{ name: "m", deployments: [{ id: "gpu-0", baseUrl: `${upstream.url}/ok`, model: "m" }] }] }, keys, { masterKey: MASTER });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const status = (key: string) => fetch(`${gw.url}/v1/kvgate/status`, { headers: { authorization: `Bearer ${key}` } });

async function chat(key: string): Promise<string | null> {
  const client = new OpenAI({ apiKey: key, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  const answer = await client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] });
  return answer.choices[0]?.message.content ?? null;
}

describe("a master key shaped like a virtual key", () => {
  it("is the master key: it reads /v1/kvgate/status and calls the models", async () => {
    expect(looksLikeVirtualKey(MASTER)).toBe(true);
    const res = await status(MASTER);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { groups: { group: string }[] }).groups.map((g) => g.group)).toEqual(["m"]);
    expect(await chat(MASTER)).toBe("ok");
  });

  it("leaves the virtual keys what they were: one made is a virtual key, one never made is refused", async () => {
    const { key } = await issuedKey(gw.url, keys.KVGATE_ADMIN_KEY);
    expect(await chat(key)).toBe("ok");
    expect((await status(key)).status).toBe(403);
    const never = await status(newKey());
    expect(never.status).toBe(401);
    expect(((await never.json()) as { error: { code: string } }).error.code).toBe("invalid_api_key");
  });
});
