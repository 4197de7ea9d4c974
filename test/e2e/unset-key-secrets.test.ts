import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * A gateway whose auth names a secret the Worker does not have: every caller gets a 401, which
 * says which setting to look at and never its value. An operator who pasted a key where its
 * secret's name goes (auth.masterKeyEnv: "<the key>", which is shaped like a name) would otherwise
 * have it sent to anyone who asks. Through the bundled gateway on a real socket.
 */

/** 40 letters and digits: a key, pasted where a secret's name goes (it is shaped like one). */
const PASTED = `Ab${randomBytes(24).toString("hex").slice(0, 38)}`;
const ADMIN = `sk-admin-${randomBytes(16).toString("hex")}`;

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway({ auth: { masterKeyEnv: PASTED, adminKeyEnv: PASTED.toUpperCase() }, modelGroups: [{ name: "m", deployments: [] }] }, { KVGATE_ADMIN_KEY: ADMIN });
});
afterAll(async () => {
  await gw?.close();
});

async function ask(path: string, key: string, init: RequestInit = {}): Promise<{ status: number; text: string }> {
  const res = await fetch(`${gw.url}${path}`, { ...init, headers: { authorization: `Bearer ${key}`, "content-type": "application/json" } });
  return { status: res.status, text: await res.text() };
}

describe("a key secret the config names and the Worker does not have", () => {
  it("answers every /v1 caller 401 saying to see auth.masterKeyEnv, never that field's value", async () => {
    expect(PASTED).toMatch(/^[A-Za-z][A-Za-z0-9]{39}$/);
    for (const key of ["sk-anything", PASTED, gw.key]) {
      for (const [path, init] of [["/v1/models", {}], ["/v1/chat/completions", { method: "POST", body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }) }]] as const) {
        const r = await ask(path, key, init);
        expect({ path, status: r.status, message: (JSON.parse(r.text) as { error: { message: string } }).error.message }).toEqual({ path, status: 401, message: "the gateway has no master key configured (see auth.masterKeyEnv)" });
        expect(r.text).not.toContain(PASTED);
      }
    }
    // The operator's log says which setting to look at, once, and not its value either.
    expect(gw.logs.filter((l) => l.includes("auth.masterKeyEnv"))).toHaveLength(1);
    expect(gw.logs.join("\n")).not.toContain(PASTED);
  });

  it("answers the admin API alike: the 401 names the setting, not the name it holds", async () => {
    const r = await ask("/admin/v1/groups", ADMIN);
    expect(r.status).toBe(401);
    expect((JSON.parse(r.text) as { error: { message: string } }).error.message).toBe("the gateway has no admin key configured (see auth.adminKeyEnv)");
    expect(r.text.toLowerCase()).not.toContain(PASTED.toLowerCase());
  });
});
