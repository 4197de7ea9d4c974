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

export function renderText(families: Iterable<MetricFamily>): string {
  const lines = [...linesOf(families)];
  return lines.length === 0 ? "" : `${lines.join("\n")}\n`;
}

/** Characters of text made, and encoded, a chunk: a few hundred lines. */
const CHUNK_CHARS = 64 * 1024;

/**
 * renderText's text, byte for byte, as UTF-8 made a chunk at a time as its reader takes them: the
 * text of a scrape of many key series is tens of MB, more than its families' samples, and neither
 * need be whole at once. `families` is read as far as the reader has come (family by family, when
 * it makes them as they are reached: src/metrics/group-metrics.ts, familyByFamily).
 */
export function renderStream(families: Iterable<MetricFamily>): ReadableStream<Uint8Array> {
  const lines = linesOf(families);
  const encoder = new TextEncoder();
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      let chunk = "";
      for (let line = lines.next(); !line.done; line = lines.next()) {
        chunk += `${line.value}\n`;
        if (chunk.length >= CHUNK_CHARS) {
          controller.enqueue(encoder.encode(chunk));
          return;
        }
      }
      if (chunk.length > 0) controller.enqueue(encoder.encode(chunk));
      controller.close();
    },
    cancel() {
      lines.return(undefined);
    },
  });
}

/** The exposition's lines, without their line feeds, each made when asked for. */
function* linesOf(families: Iterable<MetricFamily>): Generator<string, void> {
  for (const f of families) {
    yield `# HELP ${f.name} ${escapeHelp(f.help)}`;
    yield `# TYPE ${f.name} ${f.type}`;
    if (f.type !== "histogram") {
      for (const s of f.samples) yield `${f.name}${labelText(s.labels)} ${number(s.value)}`;
      continue;
    }
    for (const { labels, histogram: h } of f.samples) {
      for (const [i, le] of h.bounds.entries()) yield `${f.name}_bucket${labelText(labels, number(le))} ${number(h.cumulative[i] as number)}`;
      yield `${f.name}_bucket${labelText(labels, "+Inf")} ${number(h.count)}`;
      yield `${f.name}_sum${labelText(labels)} ${number(h.sum)}`;
      yield `${f.name}_count${labelText(labels)} ${number(h.count)}`;
    }
  }
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
