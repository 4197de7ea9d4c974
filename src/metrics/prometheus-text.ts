import type { HistogramSnapshot } from "./histogram.ts";

/**
 * Prometheus text exposition format 0.0.4: what `GET /metrics` answers. Pure: families in, text
 * out. Each family's `# HELP` and `# TYPE` come once, before its samples; label values are escaped
 * (backslash, double quote, line feed), help text too (backslash, line feed).
 */
export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

export type Labels = Readonly<Record<string, string>>;

export type MetricFamily =
  | { name: string; help: string; type: "counter" | "gauge"; samples: { labels: Labels; value: number }[] }
  | { name: string; help: string; type: "histogram"; samples: { labels: Labels; histogram: HistogramSnapshot }[] };

export function renderText(families: readonly MetricFamily[]): string {
  const lines: string[] = [];
  for (const f of families) {
    lines.push(`# HELP ${f.name} ${escapeHelp(f.help)}`, `# TYPE ${f.name} ${f.type}`);
    if (f.type !== "histogram") {
      for (const s of f.samples) lines.push(`${f.name}${labelText(s.labels)} ${number(s.value)}`);
      continue;
    }
    for (const { labels, histogram: h } of f.samples) {
      h.bounds.forEach((le, i) => lines.push(`${f.name}_bucket${labelText(labels, number(le))} ${number(h.cumulative[i] as number)}`));
      lines.push(`${f.name}_bucket${labelText(labels, "+Inf")} ${number(h.count)}`, `${f.name}_sum${labelText(labels)} ${number(h.sum)}`, `${f.name}_count${labelText(labels)} ${number(h.count)}`);
    }
  }
  return lines.length === 0 ? "" : `${lines.join("\n")}\n`;
}

function labelText(labels: Labels, le?: string): string {
  const parts: string[] = [];
  for (const [k, v] of Object.entries(labels)) parts.push(`${k}="${escapeLabel(v)}"`);
  if (le !== undefined) parts.push(`le="${le}"`);
  return parts.length === 0 ? "" : `{${parts.join(",")}}`;
}

function escapeLabel(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

function escapeHelp(v: string): string {
  return v.replace(/\\/g, "\\\\").replace(/\n/g, "\\n");
}

function number(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  return String(v);
}
