import { groupBy, median, seedFigures, type SeedFigures } from "./aggregate.ts";
import type { FeedbackResults, FeedbackRun } from "./feedback-types.ts";

/** One (config, feedback, sessions) point: medians over seeds; a learned figure is first the median over the backends. */
export interface FeedbackCell extends SeedFigures {
  kvCapacity: number | null;
  charsPerToken: number | null;
  prefillRate: number | null;
}

const cellKey = (config: string, feedback: string, sessions: number) => `${config}|${feedback}|${sessions}`;

export function feedbackCells(runs: readonly FeedbackRun[]): Map<string, FeedbackCell> {
  const groups = groupBy(runs, (r) => cellKey(r.config, r.feedback, r.sessions));
  const out = new Map<string, FeedbackCell>();
  for (const [k, group] of groups) {
    out.set(k, {
      ...seedFigures(group),
      kvCapacity: median(group.map((r) => median(r.learned.kv_capacity_blocks))),
      charsPerToken: median(group.map((r) => median(r.learned.chars_per_token))),
      prefillRate: median(group.map((r) => median(r.learned.prefill_tokens_per_sec))),
    });
  }
  return out;
}

/**
 * How much of what a wrong configuration lost feedback won back: (on − off) / (right − off), the
 * right configuration's kv_hit with feedback off as the mark. null where the wrong one lost
 * (almost) nothing to win back, or a figure is missing.
 */
export function recovered(off: number | null | undefined, on: number | null | undefined, right: number | null | undefined): number | null {
  if (off == null || on == null || right == null || right - off < 0.005) return null;
  return (on - off) / (right - off);
}

/** Issue 14's bar: with feedback, a configuration 4× off reaches this share of the right one's kv_hit. */
export const GOAL_SHARE = 0.99;

const distinct = <T>(values: T[]): T[] => [...new Set(values)];
const f = (x: number | null | undefined, digits = 0) => (x === null || x === undefined ? "–" : x.toFixed(digits));

export function renderFeedbackReport(results: FeedbackResults): string {
  const cells = feedbackCells(results.runs);
  const sessions = distinct(results.runs.map((r) => r.sessions)).sort((a, b) => a - b);
  const g = results.regime;
  const lines: string[] = [];
  lines.push("# Routing with feedback from the engines", "");
  lines.push(`Command: \`${results.command}\` — ${results.date}${results.quick ? " (--quick: by default one point, one seed, 4 turns, the capacity configs)" : ""}.`, "");
  if (results.virtual) {
    lines.push(
      `**In virtual time** (\`--virtual\`): kvgate's routing code — the group's routing object and the Worker's side of it — and the fleet simulator's engine in one process (bench/virtual/), no workerd, sockets or warm-up; ${virtualDelays(results.virtual)}, ${results.virtual.draws} draws per seed. Medians below are over every seed's draws.`,
      "",
    );
  }
  lines.push(
    `Every run: a fresh fleet of ${g.workers} simulated GPU workers (${g.preset}: ${g.kv_capacity_blocks_per_worker.toLocaleString("en")} KV blocks of 16 tokens each, prefilling ${g.prefill_tokens_per_sec.toLocaleString("en")} tokens/s at time scale ${g.time_scale}: the ${g.name} regime) and a fresh gateway, kvgate prefix-aware, the ${g.trace} trace replayed with all sessions concurrent, streamed. Each config sets every deployment's kvCapacityBlocks and prefillTokensPerSec as a multiple of the workers' real figures:`,
    "",
  );
  for (const c of results.configs) lines.push(`- \`${c.name}\`: kvCapacityBlocks × ${c.kv}, prefillTokensPerSec × ${c.rate}`);
  lines.push(
    "",
    `Feedback off: no usage read by the gateway (feedback.sampleRate 0, no virtual key), routing as configured. On: feedback.sampleRate ${results.sample_rate}, every answer's usage read and learned from. ${results.learning_pass ? "Before the measured pass, a learning pass through the same gateway and fleet — the same trace shape at another seed, not counted — as a gateway runs for longer than one trace; with feedback on, that is where it learns (off gets the same pass). " : "No learning pass (--cold): the measured pass starts from what was configured. "}${results.warm_up_requests > 0 ? `Warm-up: ${results.warm_up_requests} tiny requests, not counted. ` : ""}Figures are medians over seeds; kv_hit is Σcached / Σprompt tokens as the workers report them; TTFT is to the first content byte. "Recovered": (on − off) / (right − off), the right config's kv_hit with feedback off as the mark; – where the wrong config lost less than 0.005 to win back.`,
    "",
  );
  const wrongKv = results.configs.filter((c) => c.kv !== 1);
  if (wrongKv.length > 0) {
    lines.push("## Goal: feedback recovers the right configuration's kv_hit", "");
    lines.push(`Issue 14: where kvCapacityBlocks is 4× off either way, kv_hit with feedback on is at least ${GOAL_SHARE} × the right configuration's (feedback off).`, "");
    lines.push("| goal | sessions | config | kv_hit on | right config, off | met |", "| --- | --- | --- | --- | --- | --- |");
    for (const n of sessions) {
      const right = cells.get(cellKey("right", "off", n))?.kv_hit;
      for (const c of wrongKv) {
        const on = cells.get(cellKey(c.name, "on", n))?.kv_hit;
        const met = on == null || right == null ? "–" : on >= GOAL_SHARE * right ? "yes" : "**no**";
        lines.push(`| kv_hit on ≥ ${GOAL_SHARE} × right | ${n} | ${c.name} | ${f(on, 3)} | ${f(right, 3)} | ${met} |`);
      }
    }
    lines.push("");
  }
  lines.push("## kv_hit recovered by feedback", "");
  lines.push("| sessions | config | kv_hit off | kv_hit on | right config, off | recovered | TTFT p50 / p95 off (ms) | on (ms) | learned kv blocks (configured) | learned prefill tok/s (configured) | chars/token, learned |");
  lines.push("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |");
  for (const n of sessions) {
    const right = cells.get(cellKey("right", "off", n))?.kv_hit;
    for (const c of results.configs) {
      const off = cells.get(cellKey(c.name, "off", n));
      const on = cells.get(cellKey(c.name, "on", n));
      if (!off && !on) continue;
      const r = recovered(off?.kv_hit, on?.kv_hit, right);
      const errors = (off?.errors ?? 0) + (on?.errors ?? 0);
      lines.push(
        `| ${n} | ${c.name}${errors > 0 ? ` (${errors} errors)` : ""} | ${f(off?.kv_hit, 3)} | ${f(on?.kv_hit, 3)} | ${f(right, 3)} | ${r === null ? "–" : `${Math.round(r * 100)}%`} | ` +
          `${f(off?.p50)} / ${f(off?.p95)} | ${f(on?.p50)} / ${f(on?.p95)} | ${f(on?.kvCapacity)} (${Math.round(g.kv_capacity_blocks_per_worker * c.kv)}) | ${f(on?.prefillRate)} (${Math.round(g.prefill_tokens_per_sec * c.rate)}) | ${f(on?.charsPerToken, 2)} |`,
      );
    }
  }
  lines.push("");
  return lines.join("\n");
}

/** The delays a virtual run drew for each request; a run made before the body's read and the hop before routing names one hop. */
function virtualDelays(v: NonNullable<FeedbackResults["virtual"]>): string {
  if (v.pre_route_hop_ms === undefined) return `each request's hop to its worker a draw of 0–${v.hop_ms} ms`;
  return `each request routed after its body's read (${v.ms_per_mb ?? 0} ms per MB) and a hop of 0–${v.pre_route_hop_ms} ms, and reaching its worker after another of 0–${v.hop_ms} ms`;
}
