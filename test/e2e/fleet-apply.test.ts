import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { useTempDir } from "../support/temp-dir.ts";
import { startTestGateway, type TestGateway } from "./gateway.ts";
import { kvgate as runKvgate, type Ran } from "./npm-start-cli.ts";

/**
 * `npx kvgate fleet export > fleet.json`, edit, `npx kvgate fleet apply --file fleet.json`: the
 * whole fleet is replaced by what the file lists. A change another operator (or the CLI's own
 * drain, or a server's registration) made between the export and the apply is not in the file:
 * the apply must not silently undo it. Through the bundled gateway on a real socket and the CLI
 * as typed.
 */

const KEYS = { KVGATE_ADMIN_KEY: `sk-admin-${randomBytes(16).toString("hex")}` };

let upstream: HostileUpstream;
let gw: TestGateway;
const dir = useTempDir("kvgate-fleet-apply-");

beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway({ modelGroups: [{ name: "g", deployments: [{ id: "gpu-0", baseUrl: `${upstream.url}/ok`, model: "m" }] }] }, KEYS);
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const kvgate = (args: string[]): Promise<Ran> => runKvgate(args, { KVGATE_URL: gw.url, KVGATE_ADMIN_KEY: KEYS.KVGATE_ADMIN_KEY });

interface Exported {
  rev: number;
  modelGroups: { name: string; deployments: { id: string; weight?: number }[] }[];
}

async function exported(): Promise<Exported> {
  const r = await kvgate(["fleet", "export"]);
  expect(r.code).toBe(0);
  return JSON.parse(r.stdout) as Exported;
}

async function applied(fleet: unknown, name: string): Promise<Ran> {
  const file = join(dir(), name);
  await writeFile(file, JSON.stringify(fleet));
  return kvgate(["fleet", "apply", "--file", file]);
}

describe("fleet apply of an export", () => {
  it("is refused when the fleet changed since the export, and nothing of the change is undone", async () => {
    const before = await exported();
    // Meanwhile: a deployment added and the shipped one drained.
    expect((await kvgate(["deployments", "add", "--group", "g", "--id", "gpu-1", "--url", `${upstream.url}/ok-1`, "--model", "m"])).code).toBe(0);
    expect((await kvgate(["deployments", "drain", "--group", "g", "--id", "gpu-0"])).code).toBe(0);
    const edited = { ...before, modelGroups: before.modelGroups.map((g) => ({ ...g, deployments: g.deployments.map((d) => ({ ...d, weight: 2 })) })) };
    const stale = await applied(edited, "stale.json");
    expect(stale.code).toBe(1);
    expect(stale.stderr.join("\n")).toMatch(/409 .*fleet changed since revision \d+/);
    const now = await exported();
    expect(now.modelGroups[0]?.deployments.map((d) => d.id)).toEqual(["gpu-0", "gpu-1"]);
    const rows = (await (await fetch(`${gw.url}/admin/v1/groups/g/deployments`, { headers: { authorization: `Bearer ${KEYS.KVGATE_ADMIN_KEY}` } })).json()) as { data: { id: string; state: string }[] };
    expect(rows.data.find((d) => d.id === "gpu-0")?.state).toBe("draining");
  });

  it("is taken from a fresh export, and a file without a revision replaces the fleet as before", async () => {
    const fresh = await exported();
    const edited = { ...fresh, modelGroups: fresh.modelGroups.map((g) => ({ ...g, deployments: g.deployments.map((d) => ({ ...d, weight: 3 })) })) };
    const r = await applied(edited, "fresh.json");
    expect(r.stderr).toEqual([]);
    expect(r.code).toBe(0);
    expect((await exported()).modelGroups[0]?.deployments.map((d) => d.weight)).toEqual([3, 3]);
    const { rev: _rev, ...bare } = await exported();
    expect((await applied({ ...bare, modelGroups: bare.modelGroups.map((g) => ({ ...g, deployments: g.deployments.slice(0, 1) })) }, "bare.json")).code).toBe(0);
    expect((await exported()).modelGroups[0]?.deployments.map((d) => d.id)).toEqual(["gpu-0"]);
  });

  it("refuses a revision that is no number", async () => {
    const r = await applied({ ...(await exported()), rev: "7" }, "bad-rev.json");
    expect(r.code).toBe(1);
    expect(r.stderr.join("\n")).toMatch(/400 .*rev/);
  });
});
