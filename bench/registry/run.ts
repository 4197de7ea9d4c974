/**
 * `npm run bench:registry [-- --repeats N] [--no-write]`
 *
 * The registry's change-to-routing latency: how soon a fleet change made through the admin API
 * reaches the requests. The gateway bundled as `wrangler deploy` bundles it, in workerd
 * (Miniflare), in front of three simulated GPU servers ("instant" preset: answers take ~1 ms, so
 * the figures are the gateway's and not the servers'). Two servers are in the group from the
 * config; the third is added, drained and registered by heartbeat, N times each, while a closed
 * loop of a few clients sends chat requests all along and notes which deployment answered each.
 *   add:       from the admin call's start to the first answer from the new deployment
 *   drain:     requests routed to it that were sent after the admin call answered (should be 0)
 *   heartbeat: TTL 1 s; from the last heartbeat's answer until it takes no requests (as the admin
 *              API shows it, and as the traffic shows it), and until it is removed
 * Writes bench/results/registry.{json,md}.
 */
import { randomBytes } from "node:crypto";
import { writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { startFleet } from "../fleet/index.ts";
import { parseFlags, positiveInt } from "../harness/argv.ts";
import { startGateway } from "../harness/gateway.ts";
import { machineInfo, toolVersions } from "../overhead/machine.ts";
import { ascending, percentile } from "../stats/quantiles.ts";
import { round } from "../stats/round.ts";
import { runCli } from "../harness/cli.ts";

const RESULTS = resolve(import.meta.dirname, "..", "results");
const GROUP = "m";
const CLIENTS = 4;
/** A change that has not reached routing by then counts as a failure of the run. */
const GIVE_UP_MS = 10_000;

const args = await runCli("bench:registry", () => {
  const flags = parseFlags(process.argv.slice(2), { repeats: { type: "string", default: "20" }, "no-write": { type: "boolean", default: false } }, "--repeats N, --no-write");
  return { repeats: positiveInt("--repeats", flags.repeats), write: !flags["no-write"] };
});

interface Answered {
  sentAt: number;
  answeredAt: number;
  backend: string | null;
}

const fleet = await startFleet({ workers: 3, basePort: 0, servedModelName: GROUP, preset: "instant" });
const adminKey = `sk-admin-${randomBytes(16).toString("hex")}`;
const registerKey = `sk-register-${randomBytes(16).toString("hex")}`;
const gateway = await startGateway({
  config: { modelGroups: [{ name: GROUP, deployments: fleet.urls.slice(0, 2).map((baseUrl, i) => ({ id: `base-${i}`, baseUrl, model: GROUP })) }] },
  bindings: { KVGATE_ADMIN_KEY: adminKey, KVGATE_REGISTER_KEY: registerKey },
});
const NEW_URL = fleet.urls[2] as string;

async function admin(method: string, path: string, body?: unknown, key = adminKey): Promise<Response> {
  const res = await fetch(`${gateway.url}/admin/v1${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  await res.arrayBuffer();
  return res;
}

async function adminOk(method: string, path: string, body?: unknown, key?: string): Promise<void> {
  const res = await admin(method, path, body, key);
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status}`);
}

// The closed loop: each client sends its next request when its last one is answered.
const answered: Answered[] = [];
let running = true;
let sequence = 0;
async function client(): Promise<void> {
  while (running) {
    const sentAt = performance.now();
    const res = await fetch(`${gateway.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${gateway.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: GROUP, max_tokens: 1, messages: [{ role: "user", content: `request ${++sequence}` }] }),
    });
    await res.arrayBuffer();
    answered.push({ sentAt, answeredAt: performance.now(), backend: res.headers.get("x-kvgate-backend") });
  }
}
const clients = Array.from({ length: CLIENTS }, () => client());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The first answer from `id` sent at or after `since`, waiting for it. */
async function firstAnswer(id: string, since: number): Promise<Answered> {
  const deadline = performance.now() + GIVE_UP_MS;
  for (;;) {
    const hit = answered.find((a) => a.backend === id && a.sentAt >= since);
    if (hit) return hit;
    if (performance.now() > deadline) throw new Error(`${id} answered nothing within ${GIVE_UP_MS} ms`);
    await sleep(2);
  }
}

const addMs: number[] = [];
const drainAfterAnswer: number[] = [];
const drainLastRoutedMs: number[] = [];
const drainCallMs: number[] = [];
const hbStopApiMs: number[] = [];
const hbStopTrafficMs: number[] = [];
const hbRemovedMs: number[] = [];

for (let i = 0; i < args.repeats; i++) {
  // (1) add: the call's start to the first answer from the new deployment.
  const id = `added-${i}`;
  const t0 = performance.now();
  await adminOk("POST", `/groups/${GROUP}/deployments`, { id, baseUrl: NEW_URL, model: GROUP });
  addMs.push((await firstAnswer(id, t0)).answeredAt - t0);

  // (2) drain: nothing sent after the call answered may reach it.
  const d0 = performance.now();
  await adminOk("POST", `/groups/${GROUP}/deployments/${id}/drain`);
  const d1 = performance.now();
  await sleep(500);
  const routed = answered.filter((a) => a.backend === id && a.sentAt >= t0);
  drainAfterAnswer.push(routed.filter((a) => a.sentAt >= d1).length);
  drainLastRoutedMs.push(Math.max(0, ...routed.map((a) => a.sentAt - d0)));
  drainCallMs.push(d1 - d0);
  await adminOk("DELETE", `/groups/${GROUP}/deployments/${id}`);
  process.stdout.write(`repeat ${i + 1}/${args.repeats}: add ${addMs.at(-1)?.toFixed(0)} ms, drain: ${drainAfterAnswer.at(-1)} after the answer\n`);
}

for (let i = 0; i < args.repeats; i++) {
  // (3) heartbeat expiry: registered with TTL 1 s, renewed until it takes traffic, then not again.
  const id = `beating-${i}`;
  const beat = { group: GROUP, id, baseUrl: NEW_URL, model: GROUP, ttlSeconds: 1 };
  const h0 = performance.now();
  await adminOk("POST", "/heartbeats", beat, registerKey);
  await firstAnswer(id, h0);
  await adminOk("POST", "/heartbeats", beat, registerKey);
  const last = performance.now();
  let stopped: number | null = null;
  let removed: number | null = null;
  while (removed === null && performance.now() - last < GIVE_UP_MS) {
    const res = await fetch(`${gateway.url}/admin/v1/groups/${GROUP}/deployments/${id}`, { headers: { authorization: `Bearer ${adminKey}` } });
    const row = res.ok ? ((await res.json()) as { takesRequests: boolean }) : (await res.arrayBuffer(), null);
    const at = performance.now();
    if (res.status === 404) removed = at;
    else if (row && !row.takesRequests && stopped === null) stopped = at;
    await sleep(20);
  }
  if (stopped === null || removed === null) throw new Error(`${id} was not drained and removed within ${GIVE_UP_MS} ms`);
  hbStopApiMs.push(stopped - last);
  hbRemovedMs.push(removed - last);
  hbStopTrafficMs.push(Math.max(0, ...answered.filter((a) => a.backend === id).map((a) => a.sentAt - last)));
  process.stdout.write(`heartbeat ${i + 1}/${args.repeats}: stops taking ${hbStopApiMs.at(-1)?.toFixed(0)} ms, removed ${hbRemovedMs.at(-1)?.toFixed(0)} ms after the last\n`);
}

running = false;
await Promise.all(clients);
const requests = answered.length;
await gateway.dispose();
await fleet.close();

interface Measure {
  name: string;
  unit: string;
  median: number | null;
  p90: number | null;
  max: number | null;
}
function measure(name: string, unit: string, values: readonly number[]): Measure {
  const s = ascending(values);
  return { name, unit, median: round(percentile(s, 50)), p90: round(percentile(s, 90)), max: round(s.at(-1) ?? null) };
}
const measures: Measure[] = [
  measure("add: admin call's start → first answer from the new deployment", "ms", addMs),
  measure("drain: the admin call, start to answer", "ms", drainCallMs),
  measure("drain: requests routed to it sent after the admin call answered", "requests", drainAfterAnswer),
  measure("drain: last request routed to it, sent after the admin call's start (0: none)", "ms", drainLastRoutedMs),
  measure("heartbeat (TTL 1 s): last heartbeat → admin API shows it takes no requests", "ms", hbStopApiMs),
  measure("heartbeat (TTL 1 s): last heartbeat → last request routed to it was sent", "ms", hbStopTrafficMs),
  measure("heartbeat (TTL 1 s): last heartbeat → removed (404)", "ms", hbRemovedMs),
];

const machine = machineInfo();
const versions = toolVersions();
const at = new Date().toISOString();
const row = (m: Measure) => `| ${m.name} | ${m.median ?? "-"} | ${m.p90 ?? "-"} | ${m.max ?? "-"} | ${m.unit} |`;
const md = [
  "# Fleet registry: change-to-routing latency",
  "",
  "How soon a change made through the admin API reaches the requests: the gateway bundled as `wrangler deploy`",
  "bundles it, in workerd (Miniflare), in front of three simulated GPU servers (preset `instant`), with",
  `${CLIENTS} clients in a closed loop sending chat requests all along; ${args.repeats} repeats of each measure.`,
  "A deployment is added to the group (then drained and removed), and one registers itself with heartbeats",
  "(TTL 1 s) and then stops sending them. Target: an added deployment takes requests within 1 s.",
  "",
  "```sh",
  "npm run bench:registry",
  "```",
  "",
  `${at} · ${machine.cpu}, ${machine.cores} cores · Node ${machine.node} · kvgate ${versions.kvgate} · workerd ${versions.workerd} · ${requests} requests`,
  "",
  "| measure | median | p90 | max | unit |",
  "| --- | --- | --- | --- | --- |",
  ...measures.map(row),
  "",
  "The drain is in effect when the admin call answers: the registry pushes the change to the group's routing",
  "object before answering. A heartbeat-registered server stops taking requests at its TTL (the registry's",
  "alarm drains it) and goes a second TTL later.",
  "",
].join("\n");

if (args.write) {
  await writeFile(
    resolve(RESULTS, "registry.json"),
    JSON.stringify({ at, machine, versions, repeats: args.repeats, clients: CLIENTS, requests, measures, samples: { addMs, drainCallMs, drainAfterAnswer, drainLastRoutedMs, hbStopApiMs, hbStopTrafficMs, hbRemovedMs } }, null, 2) + "\n",
  );
  await writeFile(resolve(RESULTS, "registry.md"), md);
  console.log("wrote bench/results/registry.{json,md}");
}
console.log(md);
