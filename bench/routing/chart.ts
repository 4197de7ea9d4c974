import { aggregate, axis, key, strategiesIn } from "./aggregate.ts";
import type { RoutingResults } from "./types.ts";

const COLORS: Record<string, string> = { random: "#9a9a9a", "round-robin": "#e0a030", "least-loaded": "#3070c0", "prefix-aware": "#c03030" };
/** Peers, in the order they appear. */
const PEER_COLORS = ["#2a9a5a", "#8a50c0", "#20a0b0", "#b06a30"];
const LEGEND_ENTRY = 150;
const W = 260;
const H = 190;
const PAD = { l: 44, r: 10, t: 26, b: 30 };

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;");

/** One panel per (regime, trace): TTFT p50 (dashed) and p95 (solid) against sessions, per strategy. */
export function renderChart(results: RoutingResults): string {
  const cells = aggregate(results);
  const regimes = axis(results.runs, (r) => r.regime);
  const traces = axis(results.runs, (r) => r.trace);
  const names = strategiesIn(results.runs);
  const peers = names.filter((s) => !(s in COLORS));
  const color = (s: string) => COLORS[s] ?? PEER_COLORS[peers.indexOf(s) % PEER_COLORS.length];
  const width = traces.length * W;
  const perRow = Math.max(1, Math.floor((width - 20) / LEGEND_ENTRY));
  const legendRows = Math.ceil(names.length / perRow);
  // The legend's rows, then a line saying which dash is which.
  const height = regimes.length * H + 16 + legendRows * 14 + 14;
  const parts: string[] = [];
  parts.push(`<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}" font-family="sans-serif" font-size="10">`);
  parts.push(`<rect width="100%" height="100%" fill="white"/>`);
  regimes.forEach((regime, ri) => {
    traces.forEach((trace, ti) => {
      const x0 = ti * W;
      const y0 = ri * H;
      const runs = results.runs.filter((r) => r.regime === regime && r.trace === trace);
      if (runs.length === 0) return;
      const sessions = axis(runs, (r) => r.sessions).sort((a, b) => a - b);
      let ymax = 0;
      for (const n of sessions) for (const s of names) ymax = Math.max(ymax, cells.get(key(regime, trace, n, s))?.p95 ?? 0);
      ymax = ymax > 0 ? ymax * 1.1 : 1;
      const px = (n: number) => x0 + PAD.l + ((W - PAD.l - PAD.r) * (sessions.length === 1 ? 0.5 : sessions.indexOf(n) / (sessions.length - 1)));
      const py = (v: number) => y0 + H - PAD.b - ((H - PAD.t - PAD.b) * v) / ymax;
      parts.push(`<text x="${x0 + W / 2}" y="${y0 + 14}" text-anchor="middle" font-weight="bold">${esc(`${regime} · ${trace}`)}</text>`);
      parts.push(`<line x1="${x0 + PAD.l}" y1="${y0 + H - PAD.b}" x2="${x0 + W - PAD.r}" y2="${y0 + H - PAD.b}" stroke="#444"/>`);
      parts.push(`<line x1="${x0 + PAD.l}" y1="${y0 + PAD.t}" x2="${x0 + PAD.l}" y2="${y0 + H - PAD.b}" stroke="#444"/>`);
      for (const frac of [0, 0.5, 1]) {
        const v = (ymax / 1.1) * frac;
        parts.push(`<text x="${x0 + PAD.l - 4}" y="${py(v) + 3}" text-anchor="end">${v.toFixed(0)}</text>`);
      }
      for (const n of sessions) parts.push(`<text x="${px(n)}" y="${y0 + H - PAD.b + 12}" text-anchor="middle">${n}</text>`);
      parts.push(`<text x="${x0 + W / 2}" y="${y0 + H - 4}" text-anchor="middle" fill="#555">sessions · TTFT ms</text>`);
      for (const s of names) {
        for (const [metric, dash] of [["p95", ""], ["p50", ' stroke-dasharray="4 3"']] as const) {
          const pts = sessions
            .map((n) => [n, cells.get(key(regime, trace, n, s))?.[metric] ?? null] as const)
            .filter((p): p is readonly [number, number] => p[1] !== null)
            .map(([n, v]) => `${px(n).toFixed(1)},${py(v).toFixed(1)}`);
          if (pts.length > 0) parts.push(`<polyline points="${pts.join(" ")}" fill="none" stroke="${color(s)}" stroke-width="1.6"${dash}/>`);
        }
      }
    });
  });
  names.forEach((s, i) => {
    const x = 10 + (i % perRow) * LEGEND_ENTRY;
    const y = regimes.length * H + 16 + Math.floor(i / perRow) * 14;
    parts.push(`<line x1="${x}" y1="${y - 3}" x2="${x + 20}" y2="${y - 3}" stroke="${color(s)}" stroke-width="2"/><text x="${x + 24}" y="${y}">${esc(s)}</text>`);
  });
  parts.push(`<text x="10" y="${height - 9}" fill="#555">solid: p95 · dashed: p50</text>`);
  parts.push("</svg>");
  return `${parts.join("\n")}\n`;
}
