/**
 * overhead.svg: each target's throughput at c=50 relative to the runtime's floor (log scale), for
 * non-streaming and streaming at 20 and 100 chunks. Plain SVG, no dependencies.
 */
import type { Scenario } from "./measure.ts";
import { find, type Figures } from "./summary.ts";
import { round } from "../stats/round.ts";

const SERIES: { label: string; s: Scenario; color: string }[] = [
  { label: "non-streaming", s: { mode: "nonstream", concurrency: 50, chunks: null }, color: "#4C78A8" },
  { label: "stream, 20 chunks", s: { mode: "stream", concurrency: 50, chunks: 20 }, color: "#F58518" },
  { label: "stream, 100 chunks", s: { mode: "stream", concurrency: 50, chunks: 100 }, color: "#54A24B" },
];

const MIN = 0.01;
const MAX = 20;
const W = 760;
const LEFT = 130;
const PLOT = W - LEFT - 30;
const BAR = 10;
const ROW = SERIES.length * BAR + 14;

const x = (ratio: number): number => LEFT + (Math.log10(Math.min(MAX, Math.max(MIN, ratio)) / MIN) / Math.log10(MAX / MIN)) * PLOT;
const esc = (s: string): string => s.replace(/&/g, "&amp;").replace(/</g, "&lt;");

export function renderChart(medians: readonly Figures[]): string | null {
  const labels = [...new Set(medians.map((m) => m.label))];
  if (!labels.includes("floor")) return null;
  const top = 50;
  const height = top + labels.length * ROW + 40;
  const parts: string[] = [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${height}" font-family="sans-serif" font-size="12">`,
    `<rect width="100%" height="100%" fill="white"/>`,
    `<text x="${LEFT}" y="18" font-size="14" font-weight="bold">Requests per second at c=50, relative to the floor (log scale)</text>`,
  ];
  SERIES.forEach((ser, i) => {
    parts.push(`<rect x="${LEFT + i * 170}" y="28" width="10" height="10" fill="${ser.color}"/><text x="${LEFT + i * 170 + 14}" y="37">${ser.label}</text>`);
  });
  for (const tick of [0.01, 0.1, 0.5, 1, 2, 10]) {
    const tx = x(tick);
    parts.push(`<line x1="${tx}" y1="${top - 4}" x2="${tx}" y2="${height - 34}" stroke="${tick === 1 ? "#333" : "#ddd"}"/>`);
    parts.push(`<text x="${tx}" y="${height - 20}" text-anchor="middle">${tick}×</text>`);
  }
  labels.forEach((label, row) => {
    const y0 = top + row * ROW;
    parts.push(`<text x="${LEFT - 8}" y="${y0 + ROW / 2}" text-anchor="end">${esc(label)}</text>`);
    SERIES.forEach((ser, i) => {
      const m = find(medians, label, ser.s);
      const f = find(medians, "floor", ser.s);
      if (!m || !f || f.rps <= 0) return;
      const ratio = m.rps / f.rps;
      const y = y0 + i * BAR + 2;
      parts.push(`<rect x="${LEFT}" y="${y}" width="${Math.max(1, x(ratio) - LEFT)}" height="${BAR - 2}" fill="${ser.color}"><title>${esc(label)} ${ser.label}: ${round(m.rps)} req/s = ${ratio.toFixed(2)}× floor</title></rect>`);
      parts.push(`<text x="${x(ratio) + 4}" y="${y + BAR - 3}" font-size="9">${ratio.toFixed(2)}</text>`);
    });
  });
  parts.push("</svg>");
  return `${parts.join("\n")}\n`;
}
