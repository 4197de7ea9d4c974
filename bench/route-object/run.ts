/**
 * `npm run bench:route-object [-- --repeats N --seconds S --no-write]`
 *
 * The routing object's own work per route call: the group's router (src/routing/group-router.ts,
 * the code the model group's Durable Object runs) at 4, 32 and 128 backends and 10, 500 and
 * 2,000-block prompt chains, prefix-aware at the default settings, in steady state:
 *   - conversations share a system prompt (the chain's first quarter) and each has its own
 *     history; each call is the next turn of one picked at random, its chain the last turn's plus
 *     a few new blocks (the last reply and the new message), up to the chain length after 8
 *     turns, when a new conversation takes its place — so the prefix sets see hits, misses,
 *     branch points and evictions at their capacity;
 *   - 8 requests per backend are in flight; each call routes one and releases the oldest, as the
 *     object does when a route call carries the Worker's finished leases.
 * Timed in Node (the same V8 as workerd) with the process's CPU clock over calls in a row, less
 * the same prompts made without routing (the benchmark's own work), median of repeats that go
 * round all the points (a slow spell of a shared machine falls on every point alike); routes_per_sec is 10⁶ / µs per call: what one object could route were routing its
 * only work (the RPC's own cost in workerd comes on top; bench:ceiling's floor+route shows it).
 * Writes bench/results/route-object.{json,md}.
 */
import { writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { GroupRouter } from "../../src/routing/group-router.ts";
import { parseFlags, positiveInt, positiveNumber } from "../harness/argv.ts";
import { machineInfo } from "../overhead/machine.ts";
import { ascending, percentile } from "../stats/quantiles.ts";
import { mulberry32 } from "../traces/prng.ts";

const RESULTS = resolve(import.meta.dirname, "..", "results");
const BACKENDS = [4, 32, 128];
const CHAINS = [10, 500, 2000];
const IN_FLIGHT_PER_BACKEND = 8;
const CONVERSATIONS_PER_BACKEND = 4;
/** Turns a conversation lasts before a new one (a new history under the shared prefix) takes its place. */
const TURNS = 8;
/** The goal the issue sets: at 32 backends × 500 blocks. */
const GOAL_US = 50;

const values = parseFlags(
  process.argv.slice(2),
  { repeats: { type: "string", default: "9" }, seconds: { type: "string", default: "1" }, "no-write": { type: "boolean", default: false } },
  "--repeats N --seconds S --no-write",
);
const repeats = positiveInt("--repeats", values.repeats);
const seconds = positiveNumber("--seconds", values.seconds);

function group(backends: number): ResolvedGroup {
  const deployments = Array.from({ length: backends }, (_, i) => ({ id: `gpu-${i}`, baseUrl: `http://10.0.${i >> 8}.${i & 255}:8000`, model: "m" }));
  const r = parseConfig({ modelGroups: [{ name: "g", strategy: "prefix-aware", deployments }] });
  if (!r.ok) throw new Error(r.error);
  return r.config.groups[0] as ResolvedGroup;
}

export interface RouteObjectRun {
  backends: number;
  chain_blocks: number;
  us_per_route: number;
  routes_per_sec: number;
  /** The median's spread over repeats. */
  us_per_route_min: number;
  us_per_route_max: number;
  calls_per_repeat: number;
}

/**
 * The conversations' next prompts: each call picks one at random and returns its chain for the
 * next turn. Seeded by the point, so two of them give the same prompts in the same order.
 */
function conversations(backends: number, chainBlocks: number): () => number[] {
  const rand = mulberry32(backends * 10_007 + chainBlocks).next;
  const id = () => Math.floor(rand() * 2 ** 52);
  const shared = Array.from({ length: Math.max(1, chainBlocks >> 2) }, id);
  // Each turn adds `step` blocks; a conversation's first turn is long enough that its last is chainBlocks.
  const step = Math.max(1, Math.round(chainBlocks / 100));
  const first = Math.max(shared.length, chainBlocks - (TURNS - 1) * step);
  const fresh = (): { chain: number[]; turn: number } => ({ chain: [...shared, ...Array.from({ length: first - shared.length }, id)], turn: 0 });
  // Conversations start at staggered turns, so their restarts spread over the run.
  const all = Array.from({ length: backends * CONVERSATIONS_PER_BACKEND }, (_, i) => {
    const c = fresh();
    for (let t = 0; t < i % TURNS; t++) c.chain.push(...Array.from({ length: step }, id));
    c.turn = i % TURNS;
    return c;
  });
  return () => {
    const i = Math.floor(rand() * all.length);
    let c = all[i] as { chain: number[]; turn: number };
    if (c.turn === TURNS) c = all[i] = fresh();
    else if (c.turn > 0) for (let k = 0; k < step; k++) c.chain.push(id());
    c.turn++;
    return c.chain;
  };
}

/** A router in steady state and a function that makes one route call (and one release) for the next prompt. */
function steadyRouter(backends: number, chainBlocks: number): () => void {
  const g = group(backends);
  const router = new GroupRouter("g", mulberry32(7).next);
  router.install(g, 0);
  const next = conversations(backends, chainBlocks);
  const inFlight: string[] = [];
  let now = 0;
  return () => {
    now += 1;
    const d = router.route(g.version, next(), [], now);
    if ("refused" in d) throw new Error(`refused: ${d.refused}`);
    inFlight.push(d.lease);
    if (inFlight.length > backends * IN_FLIGHT_PER_BACKEND) router.release({ lease: inFlight.shift() as string, outcome: "ok", ttftMs: 40, durationMs: 400 }, now);
  };
}

/** CPU µs per call over `calls` calls in a row. */
function timeCalls(call: () => void, calls: number): number {
  const t0 = process.cpuUsage();
  for (let i = 0; i < calls; i++) call();
  const t = process.cpuUsage(t0);
  return (t.user + t.system) / calls;
}

interface Point {
  backends: number;
  chainBlocks: number;
  call: () => void;
  prompt: () => void;
  calls: number;
  us: number[];
}

/** A point's router in steady state, warmed up, its repeat sized to about `seconds`. */
function prepare(backends: number, chainBlocks: number): Point {
  const call = steadyRouter(backends, chainBlocks);
  // The same prompts without routing: what making them costs the benchmark, taken off each repeat.
  const prompts = conversations(backends, chainBlocks);
  const prompt = () => void prompts();
  // Warm-up: fills the prefix sets and lets V8 optimise.
  const probe = timeCalls(call, 2000);
  timeCalls(prompt, 2000);
  const calls = Math.max(1000, Math.round((seconds * 1e6) / probe));
  timeCalls(call, calls);
  timeCalls(prompt, calls);
  return { backends, chainBlocks, call, prompt, calls, us: [] };
}

function figures(p: Point): RouteObjectRun {
  const us = ascending(p.us);
  const median = percentile(us, 50) as number;
  const round = (x: number) => Math.round(x * 100) / 100;
  return { backends: p.backends, chain_blocks: p.chainBlocks, us_per_route: round(median), routes_per_sec: Math.round(1e6 / median), us_per_route_min: round(us[0] as number), us_per_route_max: round(us.at(-1) as number), calls_per_repeat: p.calls };
}

const prepared = BACKENDS.flatMap((b) => CHAINS.map((c) => prepare(b, c)));
// Repeats go round the points, so a slow spell of the shared machine falls on all of them, not on one point's repeats.
for (let r = 0; r < repeats; r++) {
  for (const p of prepared) p.us.push(timeCalls(p.call, p.calls) - timeCalls(p.prompt, p.calls));
  console.error(`repeat ${r + 1}/${repeats}`);
}
const runs = prepared.map(figures);
for (const run of runs) {
  console.error(`${String(run.backends).padStart(3)} backends × ${String(run.chain_blocks).padStart(4)} blocks: ${run.us_per_route} µs per route call (${run.us_per_route_min}–${run.us_per_route_max}), ${run.routes_per_sec} routes/s`);
}

const machine = machineInfo();
const at = new Date().toISOString();
const goal = runs.find((r) => r.backends === 32 && r.chain_blocks === 500);
const md = [
  "# The routing object's route call",
  "",
  "The model group's router — the code its Durable Object runs for each route call — in Node (the same V8 as",
  "workerd), prefix-aware at the default settings, in steady state: conversations share a system prompt (the",
  `first quarter of each chain) and have their own histories, ${CONVERSATIONS_PER_BACKEND} per backend; a call is one conversation's next turn, a few`,
  `blocks longer than its last (1% of the chain length), for ${TURNS} turns, then a new conversation takes its place;`,
  `${IN_FLIGHT_PER_BACKEND} requests per backend in flight, each call routing one and releasing the oldest (as a route call carries the`,
  "Worker's finished leases). CPU time per call over calls in a row, less the time making the same prompts",
  "takes without routing, median of repeats taken in turn over all the points (range in brackets);",
  "routes/s = 10⁶ / µs: one object's ceiling were routing its only work. The RPC into the object costs on top",
  "(bench:ceiling: floor+route − floor).",
  "",
  "```sh",
  `npm run bench:route-object${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}`,
  "```",
  "",
  `${at} · ${machine.cpu}, ${machine.cores} cores (shared) · Node ${machine.node} · median of ${repeats} × ~${seconds} s`,
  "",
  "| backends | chain blocks | µs per route call | routes/s |",
  "| --- | --- | --- | --- |",
  ...runs.map((r) => `| ${r.backends} | ${r.chain_blocks} | ${r.us_per_route} (${r.us_per_route_min}–${r.us_per_route_max}) | ${r.routes_per_sec.toLocaleString("en")} |`),
  "",
  `Goal: ≤ ${GOAL_US} µs per route call at 32 backends × 500 blocks — ${goal ? `${goal.us_per_route} µs: ${goal.us_per_route <= GOAL_US ? "met" : "**not met**"}` : "not measured"}.`,
  "",
].join("\n");

if (values["no-write"]) console.log(md);
else {
  await writeFile(resolve(RESULTS, "route-object.json"), `${JSON.stringify({ generated_at: at, machine, repeats, seconds, runs }, null, 2)}\n`);
  await writeFile(resolve(RESULTS, "route-object.md"), md);
  console.error("wrote bench/results/route-object.json and route-object.md");
}
