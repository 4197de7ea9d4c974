import { aggregate, axis, key, strategiesIn, type Cell } from "./aggregate.ts";
import type { RoutingResults } from "./types.ts";
import { baselinesIn, versusBest, worstOf, type Comparison } from "./versus-best.ts";

const f = (x: number | null, digits = 0) => (x === null ? "–" : x.toFixed(digits));
const ratio = (a: number | null, b: number | null) => (a === null || b === null || b === 0 ? null : a / b);

interface Check {
  goal: string;
  ok: boolean;
  detail: string;
}

function describeWorst(c: Comparison | undefined): string {
  if (!c) return "";
  const allowance = c.limit > 1 ? `its seeds ×${c.spread.toFixed(2)}, so a 5% allowance` : `its seeds ×${c.spread.toFixed(2)}, no allowance`;
  return `${c.metric} ${c.ratio.toFixed(3)} × ${c.baseline} at ${c.sessions} sessions (${allowance})`;
}

/** The issue's goals, checked against the medians. */
function checks(results: RoutingResults, cells: Map<string, Cell>): Check[] {
  const out: Check[] = [];
  const at = (regime: string, trace: string, sessions: number, strategy: string) => cells.get(key(regime, trace, sessions, strategy));
  // The goal set against what no routing can beat: the lowest ceiling over the sweep.
  const ceiling = (regime: string, trace: string, sessions: number[]) => {
    const hits = sessions.map((n) => {
      const c = results.ceilings.filter((x) => x.regime === regime && x.trace === trace && x.sessions === n && x.kv_hit !== null);
      return c.length ? c.reduce((a, x) => a + (x.kv_hit as number), 0) / c.length : Infinity;
    });
    const lowest = Math.min(...hits);
    return Number.isFinite(lowest) ? `; ceiling ${lowest.toFixed(3)} at ${sessions[hits.indexOf(lowest)]} sessions` : "";
  };
  for (const regime of axis(results.runs, (r) => r.regime)) {
    for (const trace of axis(results.runs.filter((r) => r.regime === regime), (r) => r.trace)) {
      const here = results.runs.filter((r) => r.regime === regime && r.trace === trace);
      const sessions = axis(here, (r) => r.sessions).sort((a, b) => a - b);
      const baselines = baselinesIn(here).filter((b) => here.some((r) => r.strategy === b));
      const compared = versusBest(cells, regime, trace, sessions, baselines);
      if (compared.length > 0) {
        out.push({
          goal: `${regime} ${trace}: prefix-aware TTFT p50 and p95 ≤ the best of ${baselines.join(", ")} at every concurrency`,
          ok: compared.every((c) => c.ratio <= c.limit),
          detail: `worst ${describeWorst(worstOf(compared, "p50"))}, ${describeWorst(worstOf(compared, "p95"))}`,
        });
      }
      const paHits = sessions.map((n) => at(regime, trace, n, "prefix-aware")?.kv_hit ?? 0);
      if (trace === "multi-turn" && regime === "roomy") {
        out.push({ goal: "roomy multi-turn: prefix-aware kv_hit ≥ 0.95 at every concurrency", ok: Math.min(...paHits) >= 0.95, detail: `min ${Math.min(...paHits).toFixed(3)}${ceiling(regime, trace, sessions)}` });
      }
      if ((trace === "multi-turn" || trace === "rag") && regime === "pressured") {
        const top = sessions.at(-1) as number;
        const pa = at(regime, trace, top, "prefix-aware");
        const ll = at(regime, trace, top, "least-loaded");
        const r95 = ratio(pa?.p95 ?? null, ll?.p95 ?? null);
        const later = ratio(pa?.later_p95 ?? null, ll?.later_p95 ?? null);
        out.push({ goal: `pressured ${trace}: prefix-aware kv_hit ≥ 0.9 at every concurrency`, ok: Math.min(...paHits) >= 0.9, detail: `min ${Math.min(...paHits).toFixed(3)}${ceiling(regime, trace, sessions)}` });
        out.push({
          goal: `pressured ${trace}: prefix-aware TTFT p95 at ${top} sessions ≤ 0.5 × least-loaded`,
          ok: r95 !== null && r95 <= 0.5,
          detail: `ratio ${f(r95, 3)}${later === null ? "" : `; turns after the first ${later.toFixed(3)}`}`,
        });
      }
      if (trace === "single-turn") {
        let worstAll = 0;
        for (const n of sessions) {
          const pa = at(regime, trace, n, "prefix-aware");
          const ll = at(regime, trace, n, "least-loaded");
          for (const k of ["p50", "p95", "p99", "total_p50"] as const) worstAll = Math.max(worstAll, ratio(pa?.[k] ?? null, ll?.[k] ?? null) ?? 0);
        }
        out.push({ goal: `${regime} single-turn: prefix-aware within 5% of least-loaded on every figure`, ok: worstAll <= 1.05, detail: `worst ratio ${worstAll.toFixed(3)}` });
      }
      if (trace === "hot-prefix") {
        const shares = sessions.map((n) => at(regime, trace, n, "prefix-aware")?.max_share ?? 1);
        const p95 = sessions.map((n) => ratio(at(regime, trace, n, "prefix-aware")?.p95 ?? null, at(regime, trace, n, "least-loaded")?.p95 ?? null) ?? Infinity);
        out.push({ goal: `${regime} hot-prefix: no backend above 1.5 × the mean share (0.375 of 4)`, ok: Math.max(...shares) <= 0.375, detail: `max share ${Math.max(...shares).toFixed(3)}` });
        out.push({ goal: `${regime} hot-prefix: TTFT p95 no worse than least-loaded`, ok: Math.max(...p95) <= 1, detail: `worst ratio ${Math.max(...p95).toFixed(3)}` });
      }
      if (trace === "tool-loop") {
        let beats = true;
        const others = strategiesIn(here).filter((x) => x !== "prefix-aware");
        for (const n of sessions) {
          const pa = at(regime, trace, n, "prefix-aware");
          for (const s of others) {
            const o = at(regime, trace, n, s);
            if (!pa || !o || (pa.kv_hit ?? 0) <= (o.kv_hit ?? 0) || (pa.p95 ?? Infinity) >= (o.p95 ?? 0)) beats = false;
          }
        }
        out.push({ goal: `${regime} tool-loop: prefix-aware beats every other strategy and peer on kv_hit and TTFT p95`, ok: beats, detail: beats ? "at every concurrency" : "not at every concurrency (see table)" });
      }
    }
  }
  return out;
}

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

export function renderReport(results: RoutingResults): string {
  const cells = aggregate(results);
  const lines: string[] = [];
  lines.push("# Routing benchmark", "");
  lines.push(`Command: \`${results.command}\` — ${results.date}${results.quick ? " (quick: one seed, fewer points)" : ""}.`, "");
  lines.push("Every run: a fresh fleet of 4 simulated GPU workers (empty KV caches) behind kvgate (Miniflare), one trace replayed with all sessions concurrent, turns in order, streaming. Figures are medians over seeds; TTFT is to the first content byte; kv_hit is Σcached / Σprompt tokens as the workers report them. The kv_hit ceiling is the same trace against one worker with an unbounded cache and no latency (mean over seeds): no routing over a fleet can beat it.", "");
  lines.push(...methodNotes(results));
  lines.push("| regime | GPU preset | time scale | KV cache per worker | sessions |", "| --- | --- | --- | --- | --- |");
  for (const r of results.regimes) lines.push(`| ${r.name} | ${r.preset} | ${r.time_scale} | ${r.kv_capacity_tokens_per_worker.toLocaleString("en")} tokens | ${r.sessions.join(", ")} |`);
  lines.push("");
  const checked = checks(results, cells);
  if (checked.length > 0) {
    lines.push("## Goals", "", "| goal | met | figure |", "| --- | --- | --- |");
    for (const c of checked) lines.push(`| ${c.goal} | ${c.ok ? "yes" : "**no**"} | ${c.detail} |`);
    lines.push("");
  }
  for (const regime of axis(results.runs, (r) => r.regime)) {
    for (const trace of axis(results.runs.filter((r) => r.regime === regime), (r) => r.trace)) {
      const runs = results.runs.filter((r) => r.regime === regime && r.trace === trace);
      const strategies = strategiesIn(runs);
      lines.push(`## ${regime} · ${trace}`, "");
      const fp = results.footprints.filter((x) => x.regime === regime && x.trace === trace);
      if (fp.length > 0) lines.push(`Working set (distinct prompt tokens, seed 1): ${fp.map((x) => `${x.sessions} sessions ${Math.round(x.working_set_tokens / 1000)}k`).join(", ")}.`, "");
      lines.push(`| sessions | kv_hit ceiling | ${strategies.map((s) => `${s} kv_hit · TTFT p50 / p95 ms`).join(" | ")} |`);
      lines.push(`| --- | --- | ${strategies.map(() => "---").join(" | ")} |`);
      for (const n of axis(runs, (r) => r.sessions).sort((a, b) => a - b)) {
        const row = strategies.map((s) => {
          const c = cells.get(key(regime, trace, n, s));
          if (!c) return "–";
          const err = c.errors > 0 ? ` (${c.errors} errors)` : "";
          return `${f(c.kv_hit, 3)} · ${f(c.p50)} / ${f(c.p95)}${err}`;
        });
        const ceil = (results.ceilings ?? []).filter((c) => c.regime === regime && c.trace === trace && c.sessions === n).map((c) => c.kv_hit ?? 0);
        const ceilText = ceil.length ? f(ceil.reduce((a, b) => a + b, 0) / ceil.length, 3) : "–";
        lines.push(`| ${n} | ${ceilText} | ${row.join(" | ")} |`);
      }
      lines.push("");
    }
  }
  lines.push("![TTFT p50 (dashed) and p95 (solid) against sessions, per strategy](routing.svg)", "");
  return lines.join("\n");
}
