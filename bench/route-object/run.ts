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
import { GroupRouter } from "../../src/routing/group-router.ts";
import { parseFlags, positiveInt, positiveNumber } from "../harness/argv.ts";
import { machineInfo } from "../overhead/machine.ts";
import { ascending, percentile } from "../stats/quantiles.ts";
import { mulberry32 } from "../traces/prng.ts";
import { shardRuns } from "./shards.ts";
import { CONVERSATIONS_PER_BACKEND, conversations, group, IN_FLIGHT_PER_BACKEND, TURNS } from "./workload.ts";
import { runCli } from "../harness/cli.ts";

const RESULTS = resolve(import.meta.dirname, "..", "results");
const BACKENDS = [4, 32, 128];
const CHAINS = [10, 500, 2000];
/** The goal the issue sets: at 32 backends × 500 blocks. */
const GOAL_US = 50;

const { values, repeats, seconds } = await runCli("bench:route-object", () => {
  const values = parseFlags(
    process.argv.slice(2),
    { repeats: { type: "string", default: "9" }, seconds: { type: "string", default: "1" }, "no-write": { type: "boolean", default: false } },
    "--repeats N --seconds S --no-write",
  );
  return { values, repeats: positiveInt("--repeats", values.repeats), seconds: positiveNumber("--seconds", values.seconds) };
});

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

// Past one object: the group split over shards, each object routing its own slice (src/sharding/).
const SHARD_POINTS = [
  ...[1, 2, 4, 8].map((shards) => ({ backends: 32, chainBlocks: 500, shards })),
  ...[1, 4, 16].map((shards) => ({ backends: 128, chainBlocks: 500, shards })),
];
const shardRunsOut = shardRuns(SHARD_POINTS, Math.round(20_000 * seconds), Math.min(repeats, 5), (line) => console.error(line));
for (const r of shardRunsOut) {
  console.error(`${String(r.backends).padStart(3)} backends over ${String(r.shards).padStart(2)} shards: ${r.routes_per_sec} routes/s (${r.routes_per_sec_min}–${r.routes_per_sec_max}), ${r.us_per_route} µs per call, busiest ${r.busiest_load}× its share, matched ${r.matched_share}`);
}
const single = (b: number) => shardRunsOut.find((r) => r.backends === b && r.shards === 1);

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
  "## Past one object: a group over shards",
  "",
  "The same conversations through a group split over N objects (`shards: N`), as the gateway routes them: the",
  "Worker's shard choice (src/sharding/shard-choice.ts: the prompt's key, rendezvous hashing, bounded loads",
  "from the in-flight counts the objects answer, the shard an earlier prompt sharing the most went to) picks the shard, and that shard's router — holding only its",
  "slice of the backends — routes. Each object's calls are timed one by one (wall clock on a quiet core);",
  "the objects of a group run side by side, each its own thread, so the group takes calls at the rate its",
  "busiest object allows: routes/s = calls ÷ the busiest object's time. Busiest = its share of the calls × N",
  "(1: an even split). Matched = prompt blocks the chosen backend held, over all routed: what sharding must",
  `not lose. Median of ${Math.min(repeats, 5)} repeats by rate (range in brackets), ${Math.round(20_000 * seconds).toLocaleString("en")} calls each after as many to warm up.`,
  "",
  "| backends | shards | routes/s the group takes | × one object | µs per call (objects) | busiest | Worker µs per call | matched |",
  "| --- | --- | --- | --- | --- | --- | --- | --- |",
  ...shardRunsOut.map((r) => {
    const one = single(r.backends);
    const times = one ? `${(r.routes_per_sec / one.routes_per_sec).toFixed(2)}×` : "–";
    return `| ${r.backends} | ${r.shards} | ${r.routes_per_sec.toLocaleString("en")} (${r.routes_per_sec_min.toLocaleString("en")}–${r.routes_per_sec_max.toLocaleString("en")}) | ${times} | ${r.us_per_route} | ${r.busiest_load} | ${r.worker_us_per_route} | ${r.matched_share} |`;
  }),
  "",
].join("\n");

if (values["no-write"]) console.log(md);
else {
  await writeFile(resolve(RESULTS, "route-object.json"), `${JSON.stringify({ generated_at: at, machine, repeats, seconds, runs, shard_runs: shardRunsOut }, null, 2)}\n`);
  await writeFile(resolve(RESULTS, "route-object.md"), md);
  console.error("wrote bench/results/route-object.json and route-object.md");
}
