import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startFleet, type Fleet } from "../../bench/fleet/index.ts";
import { freePort } from "../../bench/harness/free-port.ts";
import type { DeploymentList, DeploymentRow, FleetStatus, GroupList } from "../../src/fleet/admin-api.ts";
import { kvgate as runKvgate, npmStart, type NpmStart, type Ran } from "./npm-start-cli.ts";

/**
 * The newcomer's path of issue 11, through real processes and sockets: `npm start` (the gateway
 * on wrangler's dev server in front of the simulated fleet), one more simulated GPU server, and the CLI
 * run as a user types it (`npx kvgate …`, KVGATE_URL and KVGATE_ADMIN_KEY in its environment).
 */

const HOST = "127.0.0.1";
const GROUP = "kvgate-sim";
const SHIPPED = ["sim-0", "sim-1", "sim-2", "sim-3"];

let gateway: NpmStart;
let extra: Fleet;
let url: string;
let keys: NpmStart["keys"];
let client: OpenAI;

/** `npx kvgate <args>` with the gateway's URL and admin key, unless `env` says otherwise. */
function kvgate(args: string[], env: { KVGATE_URL?: string; KVGATE_ADMIN_KEY?: string } = {}): Promise<Ran> {
  return runKvgate(args, { KVGATE_URL: url, KVGATE_ADMIN_KEY: keys.admin, ...env });
}

async function list(): Promise<DeploymentRow[]> {
  const r = await kvgate(["deployments", "list", "--group", GROUP, "--json"]);
  expect(r.stderr).toEqual([]);
  expect(r.code).toBe(0);
  return (JSON.parse(r.stdout) as DeploymentList).data;
}

/** The admin API itself, for the steps the newcomer's path does not go through the CLI. */
async function admin(method: string, path: string, body?: unknown, key = keys.admin): Promise<Response> {
  return fetch(`${url}/admin/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
}

/** A short chat request through the SDK; the deployment that answered it. */
async function backendOf(prompt: string): Promise<string | null> {
  const { response } = await client.chat.completions.create({ model: GROUP, max_tokens: 2, messages: [{ role: "user", content: prompt }] }).withResponse();
  return response.headers.get("x-kvgate-backend");
}

beforeAll(async () => {
  // The extra GPU server: slow enough (an L4) that a stream of 60 tokens lasts a few seconds.
  // Decoding slower than an L4's (150 ms a token): the drained stream of 60 tokens lasts ~9 s,
  // past the admin calls and the npx start-up between its first byte and the check that it is
  // still in flight, however busy the machine (at ~2.9 s it once ended before that check).
  extra = await startFleet({ workers: 1, basePort: 0, servedModelName: GROUP, preset: "l4-7b", decodeStepMs: 150 });
  gateway = await npmStart();
  ({ url, keys } = gateway);
  client = new OpenAI({ baseURL: `${url}/v1`, apiKey: keys.api, maxRetries: 0 });
}, 60_000);

afterAll(async () => {
  gateway?.stop();
  await extra?.close();
});

describe("a newcomer's fleet, changed with npx kvgate while the gateway runs", () => {
  it("adds a GPU server with `deployments add` and it takes traffic", async () => {
    const added = await kvgate(["deployments", "add", "--group", GROUP, "--id", "extra", "--url", extra.urls[0] as string, "--model", GROUP]);
    expect(added.stderr).toEqual([]);
    expect(added.code).toBe(0);
    expect(added.stdout).toMatch(/^added extra to group kvgate-sim \(group revision \d+; routing follows it now\)/);

    const row = (await list()).find((r) => r.id === "extra");
    expect(row).toMatchObject({ state: "active", source: "admin", takesRequests: true, url: extra.urls[0] });

    // New prompts spread over the group; some land on the new server within a few.
    let landed = 0;
    for (let i = 0; i < 40 && landed < 2; i++) if ((await backendOf(`newcomer question ${i}: ${"why ".repeat(i)}`)) === "extra") landed++;
    expect(landed).toBe(2);
    expect(extra.requests(0).filter((r) => r.path === "/v1/chat/completions").length).toBeGreaterThanOrEqual(2);
  }, 90_000);

  it("drains it with `deployments drain`: the stream in flight finishes whole, no new request reaches it", async () => {
    // The honest way to put a stream on `extra`: the others take nothing for a moment.
    for (const id of SHIPPED) expect((await admin("POST", `/groups/${GROUP}/deployments/${id}/disable`)).status).toBe(200);
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${keys.api}`, "content-type": "application/json" },
      body: JSON.stringify({ model: GROUP, stream: true, max_tokens: 60, stream_options: { include_usage: true }, messages: [{ role: "user", content: "tell me a long story" }] }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-kvgate-backend")).toBe("extra");
    const body = res.text();
    for (const id of SHIPPED) expect((await admin("POST", `/groups/${GROUP}/deployments/${id}/enable`)).status).toBe(200);

    const drained = await kvgate(["deployments", "drain", "--group", GROUP, "--id", "extra"]);
    expect(drained.stderr).toEqual([]);
    expect(drained.code).toBe(0);
    expect(drained.stdout).toContain("draining extra");

    const during = (await list()).find((r) => r.id === "extra");
    expect(during).toMatchObject({ state: "draining", takesRequests: false, drained: false });
    expect(during?.inFlight).toBeGreaterThanOrEqual(1);

    const before = extra.requests(0).length;
    for (let i = 0; i < 8; i++) expect(await backendOf(`after the drain ${i}`)).not.toBe("extra");
    expect(extra.requests(0).length).toBe(before);

    // The stream was still running all along, and ends whole: every token, the usage, [DONE].
    const text = await body;
    const events = text.split("\n\n").filter((e) => e.startsWith("data: "));
    expect(events.at(-1)).toBe("data: [DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e.slice(6)) as { choices: { delta?: { content?: string }; finish_reason: string | null }[]; usage?: { completion_tokens: number } | null });
    expect(chunks.some((c) => c.choices[0]?.finish_reason === "length")).toBe(true);
    expect(chunks.at(-1)?.usage?.completion_tokens).toBe(60);

    let after = (await list()).find((r) => r.id === "extra");
    for (let i = 0; i < 10 && after?.inFlight !== 0; i++) after = (await list()).find((r) => r.id === "extra");
    expect(after).toMatchObject({ state: "draining", inFlight: 0, drained: true, takesRequests: false });
    const plain = await kvgate(["deployments", "list", "--group", GROUP]);
    expect(plain.stdout).toMatch(/^extra\s+drained\s+0\s+no\s/m);
  }, 90_000);

  it("removes it with `deployments remove`", async () => {
    const removed = await kvgate(["deployments", "remove", "--group", GROUP, "--id", "extra"]);
    expect(removed.stderr).toEqual([]);
    expect(removed.code).toBe(0);
    expect(removed.stdout).toMatch(/^removed extra from group kvgate-sim/);
    expect((await list()).map((r) => r.id)).toEqual(SHIPPED);
  }, 30_000);

  it("shows a server that registers itself with heartbeats, drains it a TTL after its last one and removes it a TTL later", async () => {
    const beat = { group: GROUP, id: "beating", baseUrl: extra.urls[0], model: GROUP, ttlSeconds: 1 };
    // A sidecar renews well within the TTL while the CLI looks. The registry stores a heartbeat
    // after it was sent, so the TTL counts from no earlier than the last send (timed from its
    // answer, a slow answer made the steps look early).
    let last = 0;
    const renewals: Promise<void>[] = [];
    const renew = async (): Promise<void> => {
      last = Date.now();
      const res = await admin("POST", "/heartbeats", beat, keys.register);
      expect(res.status).toBe(200);
    };
    await renew();
    const renewing = setInterval(() => renewals.push(renew()), 300);
    let seen: DeploymentRow | undefined;
    try {
      seen = (await list()).find((r) => r.id === "beating");
    } finally {
      clearInterval(renewing);
    }
    expect(seen).toMatchObject({ source: "heartbeat", state: "active", takesRequests: true });
    expect(seen?.expiresAt).not.toBeNull();
    // Every renewal sent has landed (not a fixed sleep: a loaded machine's could land later).
    await Promise.all(renewals);
    // Not sent again: the admin API, polled finely, times the two steps; the CLI, slower to start, follows.
    const states: { at: number; state: string }[] = [];
    const cliSaw = new Set<string>();
    const cliPoll = (async () => {
      for (let i = 0; i < 8; i++) {
        const row = (await list()).find((r) => r.id === "beating");
        cliSaw.add(row ? (row.takesRequests ? "active" : "draining") : "gone");
        if (!row) return;
      }
    })();
    const deadline = Date.now() + 6_000;
    while (Date.now() < deadline) {
      const rows = ((await (await admin("GET", `/groups/${GROUP}/deployments`)).json()) as DeploymentList).data;
      const row = rows.find((r) => r.id === "beating");
      const state = row ? `${row.state}/${row.takesRequests}` : "gone";
      if (states.at(-1)?.state !== state) states.push({ at: Date.now() - last, state });
      if (!row) break;
      await new Promise((r) => setTimeout(r, 50));
    }
    await cliPoll;
    const draining = states.find((s) => s.state === "draining/false");
    const gone = states.find((s) => s.state === "gone");
    expect(draining, JSON.stringify(states)).toBeDefined();
    expect(gone, JSON.stringify(states)).toBeDefined();
    // Not before 1 s and 2 s after the last heartbeat was sent; drained first, then gone. (No bound
    // after: that would time the machine; the 6 s deadline bounds steps that never come.)
    expect(states.map((s) => s.state).slice(-2), JSON.stringify(states)).toEqual(["draining/false", "gone"]);
    expect(draining?.at).toBeGreaterThanOrEqual(1_000);
    expect(gone?.at).toBeGreaterThanOrEqual(2_000);
    expect(cliSaw.has("gone")).toBe(true);
  }, 60_000);
});

describe("npx kvgate's failures and overviews", () => {
  it("says in one line that the admin key is wrong, with no stack", async () => {
    const r = await kvgate(["deployments", "list", "--group", GROUP], { KVGATE_ADMIN_KEY: "sk-not-the-admin-key" });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toHaveLength(1);
    expect(r.stderr[0]).toMatch(/^kvgate: GET \/admin\/v1\/groups\/kvgate-sim\/deployments: 401 /);
    expect(r.stdout).toBe("");
  }, 30_000);

  it("passes on the API's message for an unknown group", async () => {
    const r = await kvgate(["deployments", "list", "--group", "no-such-group"]);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toEqual(['kvgate: GET /admin/v1/groups/no-such-group/deployments: 404 no group "no-such-group" in the fleet']);
  }, 30_000);

  it("exits 2 with the usage when --group is missing", async () => {
    const r = await kvgate(["deployments", "list"]);
    expect(r.code).toBe(2);
    expect(r.stderr[0]).toBe("kvgate: --group is required");
    expect(r.stderr.join("\n")).toContain("usage: npx kvgate <command>");
  }, 30_000);

  it("checks every flag before it sends anything: a wrong one exits 2 with the usage, and nothing changed", async () => {
    const cases: [string[], string][] = [
      [["deployments", "drain", "--group", GROUP, "--id", "sim-0", "--wait", "--timeout", "abc"], 'kvgate: --timeout must be a number, not "abc"'],
      [["deployments", "update", "--group", GROUP, "--id", "sim-0"], "kvgate: deployments update needs at least one flag to change"],
    ];
    try {
      for (const [args, message] of cases) {
        const r = await kvgate(args);
        expect({ args, code: r.code, first: r.stderr[0], stdout: r.stdout }).toEqual({ args, code: 2, first: message, stdout: "" });
        expect(r.stderr.join("\n")).toContain("usage: npx kvgate <command>");
      }
      expect((await list()).find((r) => r.id === "sim-0")).toMatchObject({ state: "active", takesRequests: true });
    } finally {
      // Had the drain gone out, the overviews below would count one server fewer.
      await admin("POST", `/groups/${GROUP}/deployments/sim-0/enable`);
    }
  }, 60_000);

  it("says it cannot reach a gateway that is not running", async () => {
    const closed = await freePort(HOST);
    const r = await kvgate(["status"], { KVGATE_URL: `http://${HOST}:${closed}` });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toHaveLength(1);
    expect(r.stderr[0]).toMatch(new RegExp(`^kvgate: cannot reach the gateway at http://${HOST}:${closed} \\(ECONNREFUSED\\)`));
  }, 30_000);

  it("lists the groups and the status, plain and as JSON", async () => {
    const groups = await kvgate(["groups", "list", "--json"]);
    expect(groups.code).toBe(0);
    expect((JSON.parse(groups.stdout) as GroupList).data.map((g) => [g.name, g.deployments])).toEqual([[GROUP, 4]]);
    const groupsPlain = await kvgate(["groups", "list"]);
    expect(groupsPlain.code).toBe(0);
    expect(groupsPlain.stdout).toMatch(/^NAME\s+STRATEGY\s+DEPLOYMENTS/);
    expect(groupsPlain.stdout).toMatch(/^kvgate-sim\s+prefix-aware\s+4\s/m);

    const status = await kvgate(["status", "--json"]);
    expect(status.code).toBe(0);
    const s = JSON.parse(status.stdout) as FleetStatus;
    expect(s.groups).toEqual([expect.objectContaining({ name: GROUP, deployments: 4, takingRequests: 4, inFlight: 0 })]);
    expect(s.groups[0]?.routingRev).toBe(s.groups[0]?.rev);
    const plain = await kvgate(["status"]);
    expect(plain.code).toBe(0);
    expect(plain.stdout).toContain(`${url}: fleet revision ${s.rev}, 1 group(s)`);
    expect(plain.stdout).toMatch(/^kvgate-sim\s+4\s+4\s+0\s+\d+\s+current$/m);
  }, 60_000);
});
