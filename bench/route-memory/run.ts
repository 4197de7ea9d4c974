/**
 * `npm run bench:route-memory [-- --no-write]`
 *
 * What a model group's routing state costs in memory, by number of backends: the Durable Object's
 * router (src/routing/group-router.ts) with every backend's prefix set filled to its capacity, at
 * the default settings (kvCapacityBlocks 65,536 each, prefixBudgetBlocks 1,048,576 for the group).
 * Measured in Node (run with --expose-gc): the heap plus ArrayBuffer memory after a full GC,
 * before and after building and filling the router. A prefix set's arrays take the same bytes in
 * any V8; the rest (backend objects, hot-prefix scores) is small beside them. For comparison, the
 * same entries in a Map of 53-bit keys (the representation before 83e944b), whose cost depends
 * on the engine and on churn: measured here in Node, filled once.
 * Writes bench/results/route-memory.{json,md}.
 */
import { writeFile } from "node:fs/promises";
import { resolve } from "node:path";
import { parseFlags } from "../harness/argv.ts";
import { machineInfo } from "../overhead/machine.ts";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { GroupRouter } from "../../src/routing/group-router.ts";
import { runCli } from "../harness/cli.ts";

const RESULTS = resolve(import.meta.dirname, "..", "results");
const BACKENDS = [4, 32, 64, 128];
/** Blocks per synthetic prompt: unique prompts, so each one fills a backend with new entries. */
const PROMPT_BLOCKS = 1024;
const MiB = 1024 * 1024;

const noWrite = await runCli("bench:route-memory", () => parseFlags(process.argv.slice(2), { "no-write": { type: "boolean", default: false } }, "--no-write")["no-write"]);
const args = { write: !noWrite };

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error("run with node --expose-gc (npm run bench:route-memory does)");

/** Heap and ArrayBuffer bytes in use after a full collection. */
function used(): number {
  (gc as () => void)();
  (gc as () => void)();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

function group(backends: number): ResolvedGroup {
  const deployments = Array.from({ length: backends }, (_, i) => ({ id: `gpu-${i}`, baseUrl: `http://10.0.${i >> 8}.${i & 255}:8000`, model: "m" }));
  const r = parseConfig({ modelGroups: [{ name: "g", deployments }] });
  if (!r.ok) throw new Error(r.error);
  return r.config.groups[0] as ResolvedGroup;
}

interface Row {
  backends: number;
  capacityPerBackend: number;
  entries: number;
  routerBytes: number;
  bytesPerEntry: number;
  /** The same number of entries in the old Map-based sets, unbounded: backends × kvCapacityBlocks. */
  unboundedMapBytes: number;
}

/** Fills every backend's prefix set through the router, as traffic would: unique prompts, each released. */
function fill(router: GroupRouter, g: ResolvedGroup): void {
  let prompt = 0;
  for (;;) {
    const snap = router.snapshot();
    if (snap.every((b) => b.prefixBlocks >= b.prefixCapacity)) return;
    const base = ++prompt * 1e7;
    const chain = Array.from({ length: PROMPT_BLOCKS }, (_, k) => base + k);
    const d = router.route(g.version, chain, [], prompt);
    if ("refused" in d) throw new Error(`refused: ${d.refused}`);
    router.release({ lease: d.lease, outcome: "ok" }, prompt);
  }
}

/** Bytes an entry takes in a Map of 53-bit keys to booleans, as the prefix sets were. */
function mapBytesPerEntry(): number {
  const n = 1 << 20;
  const before = used();
  const maps: Map<number, boolean>[] = [];
  for (let m = 0; m < 16; m++) {
    const map = new Map<number, boolean>();
    for (let i = 0; i < n / 16; i++) map.set((m * 2 ** 40 + i) * 1987, true);
    maps.push(map);
  }
  const bytes = used() - before;
  if (maps.length !== 16) throw new Error("unreachable");
  return bytes / n;
}

/**
 * One router, built and measured in a frame of its own: once this returns nothing holds it, so
 * the next measurement's baseline does not include it.
 */
function measure(n: number, mapPerEntry: number): Row {
  const g = group(n);
  const before = used();
  const router = new GroupRouter("g");
  router.install(g, 0);
  fill(router, g);
  const routerBytes = used() - before;
  const snap = router.snapshot();
  const entries = snap.reduce((s, b) => s + b.prefixBlocks, 0);
  return { backends: n, capacityPerBackend: snap[0]?.prefixCapacity ?? 0, entries, routerBytes, bytesPerEntry: routerBytes / entries, unboundedMapBytes: n * 65_536 * mapPerEntry };
}

const mapPerEntry = mapBytesPerEntry();
const rows: Row[] = [];
for (const n of BACKENDS) {
  const row = measure(n, mapPerEntry);
  rows.push(row);
  console.log(`${n} backends: ${row.entries} entries, ${(row.routerBytes / MiB).toFixed(1)} MiB, ${row.bytesPerEntry.toFixed(1)} B/entry`);
}

const machine = machineInfo();
const md = [
  "# Routing state memory",
  "",
  "A model group's router (what its Durable Object holds) with every backend's prefix set filled to its",
  "capacity, at the default settings: kvCapacityBlocks 65,536 per backend, prefixBudgetBlocks 1,048,576",
  "for the group. Measured in Node: heap plus ArrayBuffer bytes after a full GC, before and after building",
  "and filling the router. The last column is what the same backends' full sets took before the budget and",
  `the typed-array sets: a Map of 53-bit keys, ${mapPerEntry.toFixed(1)} bytes an entry here when filled once (LRU churn, a`,
  "delete and re-insert per touch, leaves deleted slots that cost more; the issue measured ~45 in workerd), unbounded",
  "by the number of backends.",
  "",
  "```sh",
  "npm run bench:route-memory",
  "```",
  "",
  `${new Date().toISOString()} · ${machine.cpu}, ${machine.cores} cores · Node ${machine.node}`,
  "",
  "| backends | prefix capacity each | entries | router memory | bytes / entry | before: Map sets, no budget |",
  "| --- | --- | --- | --- | --- | --- |",
  ...rows.map((r) => `| ${r.backends} | ${r.capacityPerBackend.toLocaleString("en")} | ${r.entries.toLocaleString("en")} | ${(r.routerBytes / MiB).toFixed(1)} MiB | ${r.bytesPerEntry.toFixed(1)} | ${(r.unboundedMapBytes / MiB).toFixed(0)} MiB |`),
  "",
].join("\n");

if (args.write) {
  await writeFile(resolve(RESULTS, "route-memory.json"), JSON.stringify({ at: new Date().toISOString(), machine, mapBytesPerEntry: mapPerEntry, rows }, null, 2) + "\n");
  await writeFile(resolve(RESULTS, "route-memory.md"), md);
  console.log("wrote bench/results/route-memory.{json,md}");
} else {
  console.log(md);
}
