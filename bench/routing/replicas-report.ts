import { groupBy, seedFigures, type SeedFigures } from "./aggregate.ts";
import type { ReplicaResults, ReplicaRun } from "./replicas-types.ts";

/** The figures of one (router, instances, sessions) point: medians over seeds. */
export type ReplicaCell = SeedFigures;

const cellKey = (router: string, instances: number, sessions: number) => `${router}|${instances}|${sessions}`;

export function replicaCells(runs: readonly ReplicaRun[]): Map<string, ReplicaCell> {
  const groups = groupBy(runs, (r) => cellKey(r.router, r.instances, r.sessions));
  const out = new Map<string, ReplicaCell>();
  for (const [k, group] of groups) {
    out.set(k, seedFigures(group));
  }
  return out;
}

/**
 * A router's kv_hit with `instances` over its kv_hit with one instance, at the session count
 * where it keeps the least of it; null where either was not run.
 */
export function worstKept(cells: Map<string, ReplicaCell>, router: string, instances: number, sessions: readonly number[]): { ratio: number; sessions: number } | null {
  let worst: { ratio: number; sessions: number } | null = null;
  for (const n of sessions) {
    const one = cells.get(cellKey(router, 1, n))?.kv_hit;
    const many = cells.get(cellKey(router, instances, n))?.kv_hit;
    if (one === undefined || one === null || one === 0 || many === undefined || many === null) continue;
    const ratio = many / one;
    if (!worst || ratio < worst.ratio) worst = { ratio, sessions: n };
  }
  return worst;
}

const distinct = <T>(values: T[]): T[] => [...new Set(values)];
const f = (x: number | null | undefined, digits = 0) => (x === null || x === undefined ? "–" : x.toFixed(digits));

export function renderReplicasReport(results: ReplicaResults): string {
  const cells = replicaCells(results.runs);
  const routers = distinct(results.runs.map((r) => r.router));
  const instances = distinct(results.runs.map((r) => r.instances)).sort((a, b) => a - b);
  const sessions = distinct(results.runs.map((r) => r.sessions)).sort((a, b) => a - b);
  const g = results.regime;
  const lines: string[] = [];
  lines.push("# Routing across gateway instances", "");
  lines.push(`Command: \`${results.command}\` — ${results.date}${results.quick ? " (quick: fewer points, one seed, 4 turns)" : ""}.`, "");
  lines.push(
    `Every run: a fresh fleet of ${g.workers} simulated GPU workers (${g.preset}, ${g.kv_capacity_tokens_per_worker.toLocaleString("en")} tokens of KV cache each, time scale ${g.time_scale}: the ${g.name} regime), the ${results.trace} trace replayed with all sessions concurrent, turns in order, streamed, through N instances of one router. Spread: ${results.spread}, by a local fan-out on 127.0.0.1 that every router's requests cross alike (one loopback hop, N = 1 included) — as edge traffic reaches whichever location and isolate it reaches.`,
    "",
    "- kvgate: N copies of the bundled gateway Worker in one workerd, each its own Worker and isolate (its own module state, key cache and lease batching) on its own socket, all bound to the first copy's Durable Object classes — one routing object for the group, as every isolate of a deployment shares it.",
  );
  for (const p of results.peers) lines.push(`- \`${p.name}\`: N independent processes of ${p.package} ${p.version} (${p.settings}), each knowing every worker and keeping its own index.`);
  lines.push(
    "",
    `Warm-up: ${results.warm_up_requests} tiny streamed requests through each instance, then through the fan-out, not counted (shorter than one KV block: caches stay empty). Figures are medians over seeds; kv_hit is Σcached / Σprompt tokens as the workers report them; TTFT is to the first content byte. The ceiling is the same trace against one worker with an unbounded cache and no latency (mean over seeds).`,
    "",
  );
  if (instances.some((n) => n > 1) && instances.includes(1)) {
    const more = instances.filter((n) => n > 1);
    lines.push("## kv_hit kept with N instances", "", "N instances' kv_hit over one instance's, at the session count where the router keeps the least of it.", "");
    lines.push(`| router | ${more.map((n) => `${n} instances`).join(" | ")} |`, `| --- | ${more.map(() => "---").join(" | ")} |`);
    for (const router of routers) {
      const row = more.map((n) => {
        const w = worstKept(cells, router, n, sessions);
        return w ? `${w.ratio.toFixed(3)} (${w.sessions} sessions)` : "–";
      });
      lines.push(`| ${router} | ${row.join(" | ")} |`);
    }
    lines.push("");
  }
  lines.push("## kv_hit · TTFT p50 / p95 (ms)", "");
  lines.push(`| router | instances | ${sessions.map((n) => `${n} sessions`).join(" | ")} |`, `| --- | --- | ${sessions.map(() => "---").join(" | ")} |`);
  const ceilings = sessions.map((n) => {
    const c = results.ceilings.filter((x) => x.sessions === n && x.kv_hit !== null).map((x) => x.kv_hit as number);
    return c.length ? f(c.reduce((a, b) => a + b, 0) / c.length, 3) : "–";
  });
  lines.push(`| kv_hit ceiling | – | ${ceilings.join(" | ")} |`);
  for (const router of routers) {
    for (const n of instances) {
      const row = sessions.map((s) => {
        const c = cells.get(cellKey(router, n, s));
        if (!c) return "–";
        return `${f(c.kv_hit, 3)} · ${f(c.p50)} / ${f(c.p95)}${c.errors > 0 ? ` (${c.errors} errors)` : ""}`;
      });
      lines.push(`| ${router} | ${n} | ${row.join(" | ")} |`);
    }
  }
  lines.push("");
  return lines.join("\n");
}
