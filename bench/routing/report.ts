import { openLoopKvRule, ttftRuleOf } from "../replay/index.ts";
import { RATIO_MARKS } from "../stats/quantiles.ts";
import { aggregate, atLeastMark, axis, key, median, strategiesIn } from "./aggregate.ts";
import { closedLoopComparisons, evaluateGoals } from "./goals.ts";
import { commitsOf, mixedPoints } from "./merge.ts";
import { renderOpenLoopSections } from "./open-loop-report.ts";
import { renderP95Split } from "./p95-split.ts";
import type { RelatedResult } from "./related-results.ts";
import { shardPairsLine } from "./shard-pairs.ts";
import type { RoutingResults } from "./types.ts";

const f = (x: number | null, digits = 0) => (x === null ? "–" : x.toFixed(digits));

/** What this run did beyond the common method: its peers and its warm-up. */
function methodNotes(results: RoutingResults): string[] {
  const out: string[] = [];
  if (results.peers && results.peers.length > 0) {
    const peers = results.peers.map((p) => `\`${p.name}\` (${p.package} ${p.version}, ${p.settings})`).join("; ");
    out.push(`Peers, each a fresh process in front of its own fresh fleet, on the same traces in the same run: ${peers}. A peer names no backend in its answers: its backend share is counted from the workers' own request counters.`, "");
  }
  if (results.warm_up_requests) {
    out.push(`Warm-up: before each run, ${results.warm_up_requests} streamed requests with tiny unrelated prompts (one output token; prompt and answer shorter than one 16-token KV block, so no worker caches any of them) go through the router being measured, all at once, and are not counted: the first requests of a fresh Miniflare, and of a fresh peer process, pay its start-up.`, "");
  }
  return out;
}

/** Results made in parts (--merge): each command, and the commits the runs were made at. */
function partsNote(results: RoutingResults): string[] {
  const parts = results.parts ?? [];
  if (parts.length < 2) return [];
  const all = [...results.runs, ...(results.open_loop_runs ?? [])];
  const commits = commitsOf(all).map((c) => `${c.commit} (${c.runs} runs)`);
  const mixed = mixedPoints(all, parts);
  const within = mixed === 0 ? "every point's routers ran together, in one part, so every comparison below is within one part" : `**${mixed} point${mixed === 1 ? " has" : "s have"} runs from more than one part**: ${mixed === 1 ? "its" : "their"} comparisons cross parts`;
  return [
    `Made in ${parts.length} parts (\`--merge\`), each replacing the runs of the points it made; ${within}. Runs by commit: ${commits.join(", ")}.`,
    "",
    ...parts.map((p) => `- \`${p.command}\` — ${p.date}${p.commit ? ` at ${p.commit}` : ""}`),
    "",
  ];
}

/** (e): the other routing benchmarks' reports, those present. */
function relatedLines(related: readonly RelatedResult[]): string[] {
  if (related.length === 0) return [];
  return [
    ...related.map((r) => {
      const goals = r.goals ? `; its goals: ${r.goals.met} met, ${r.goals.missed} not` : "";
      return `- (e) \`${r.command}\`: [${r.file}](${r.file}) — ${r.title}${r.date ? `, ${r.date}` : ""}${goals}.`;
    }),
    "",
  ];
}

export function renderReport(results: RoutingResults, related: readonly RelatedResult[] = []): string {
  const cells = aggregate(results);
  const lines: string[] = [];
  lines.push("# Routing benchmark", "");
  lines.push(`Command: \`${results.command}\` — ${results.date}${results.quick ? " (quick: one seed, fewer points)" : ""}.`, "");
  lines.push(...partsNote(results));
  const closed = results.runs.length > 0;
  if (closed) {
    lines.push("Every closed-loop run: a fresh fleet of 4 simulated GPU workers (empty KV caches) behind kvgate (Miniflare), one trace replayed with all sessions concurrent, turns in order, streaming. Figures are medians over seeds; TTFT is to the first content byte; kv_hit is Σcached / Σprompt tokens as the workers report them. The kv_hit ceiling is the same trace against one worker with an unbounded cache and no latency (median over seeds): no routing over a fleet can beat it.", "");
  }
  const open = (results.open_loop_runs ?? []).length > 0;
  if (open) {
    lines.push(`Every open-loop run (the open-loop sections): a fresh fleet of 4 simulated GPU workers, each request of the trace sent at its arrival time whatever is still open, streaming; its kv_hit ceiling is one infinite cache that sees every request in arrival order (bench/traces/prefix-ceiling.ts). ${openLoopKvRule(results.open_loop_runs ?? [])}`, "");
  }
  // Results made before the rule have no bounds to mark.
  if (closed || open) lines.push(results.ttft_rule ? `${ttftRuleOf(results)} ${RATIO_MARKS}` : ttftRuleOf(results), "");
  lines.push(...methodNotes(results));
  if (closed) {
    lines.push("| regime | GPU preset | time scale | KV cache per worker | sessions |", "| --- | --- | --- | --- | --- |");
    for (const r of results.regimes) lines.push(`| ${r.name} | ${r.preset} | ${r.time_scale} | ${r.kv_capacity_tokens_per_worker.toLocaleString("en")} tokens | ${r.sessions.join(", ")} |`);
    lines.push("");
  }
  const checked = evaluateGoals(results);
  if (checked.length > 0 || related.length > 0) lines.push("## Goals", "");
  if (checked.length > 0) {
    lines.push(
      "Issue 14's goals, on medians over seeds, at every trace and point of this run. A ratio divides prefix-aware's median over its seeds by the baseline's over its own, as the issue's goals are stated; each seed is another draw of the trace, so the two medians may be of different seeds, and the median of each seed's own ratio can differ from it, either way.",
      "",
    );
    lines.push("| goal | met | figure |", "| --- | --- | --- |");
    for (const c of checked) lines.push(`| ${c.goal} | ${c.ok ? "yes" : "**no**"} | ${c.detail} |`);
    lines.push("");
  }
  lines.push(...relatedLines(related));
  // Closed-loop points only: the cells of the tables below.
  if (checked.length > 0) lines.push(...renderP95Split(cells, closedLoopComparisons(results, cells)));
  for (const regime of axis(results.runs, (r) => r.regime)) {
    for (const trace of axis(results.runs.filter((r) => r.regime === regime), (r) => r.trace)) {
      const runs = results.runs.filter((r) => r.regime === regime && r.trace === trace);
      const strategies = strategiesIn(runs);
      lines.push(`## ${regime} · ${trace}`, "");
      const fp = results.footprints.filter((x) => x.regime === regime && x.trace === trace);
      if (fp.length > 0) lines.push(`Working set (distinct prompt tokens, seed 1): ${fp.map((x) => `${x.sessions} sessions ${Math.round(x.working_set_tokens / 1000)}k`).join(", ")}.`, "");
      lines.push(`| sessions | kv_hit ceiling | ${strategies.map((s) => `${s} kv_hit · TTFT p50 / p95 ms`).join(" | ")} |`);
      lines.push(`| --- | --- | ${strategies.map(() => "---").join(" | ")} |`);
      const sharded: string[] = [];
      for (const n of axis(runs, (r) => r.sessions).sort((a, b) => a - b)) {
        const paired = shardPairsLine(runs.filter((r) => r.sessions === n));
        if (paired) sharded.push(`- ${n} sessions: ${paired}`);
        const row = strategies.map((s) => {
          const c = cells.get(key(regime, trace, n, s));
          if (!c) return "–";
          const err = c.errors > 0 ? ` (${c.errors} errors)` : "";
          return `${f(c.kv_hit, 3)} · ${atLeastMark(c, "p50")}${f(c.p50)} / ${atLeastMark(c, "p95")}${f(c.p95)}${err}`;
        });
        // A median, as the cells are: a mean of the seeds' ceilings can sit under a router's median kv_hit that reached its ceiling in every seed.
        const ceil = median((results.ceilings ?? []).filter((c) => c.regime === regime && c.trace === trace && c.sessions === n).map((c) => c.kv_hit));
        lines.push(`| ${n} | ${f(ceil, 3)} | ${row.join(" | ")} |`);
      }
      lines.push("");
      if (sharded.length > 0) lines.push(...sharded, "");
    }
  }
  lines.push(...renderOpenLoopSections(results));
  if (results.runs.length > 0) lines.push("![TTFT p50 (dashed) and p95 (solid) against sessions, per strategy](routing.svg)", "");
  return lines.join("\n");
}
