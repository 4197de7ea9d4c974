import { describe, expect, it } from "vitest";
import { Histogram, LATENCY_BUCKETS_S } from "../../src/metrics/histogram.ts";
import { renderStream, renderText, type MetricFamily } from "../../src/metrics/prometheus-text.ts";

describe("Histogram", () => {
  it("counts each observation in the first bucket whose bound is at least it, cumulatively, and +Inf past the last", () => {
    const h = new Histogram([0.1, 1, 10]);
    for (const v of [0.05, 0.1, 0.5, 1, 3, 99]) h.observe(v);
    expect(h.snapshot()).toEqual({ bounds: [0.1, 1, 10], cumulative: [2, 4, 5], sum: 0.05 + 0.1 + 0.5 + 1 + 3 + 99, count: 6 });
  });

  it("ignores negative, NaN and infinite observations", () => {
    const h = new Histogram([1]);
    for (const v of [-1, Number.NaN, Infinity, 0]) h.observe(v);
    expect(h.snapshot()).toMatchObject({ cumulative: [1], count: 1, sum: 0 });
  });

  it("has latency buckets from 5 ms to a minute, ascending", () => {
    expect(LATENCY_BUCKETS_S[0]).toBe(0.005);
    expect(LATENCY_BUCKETS_S.at(-1)).toBe(60);
    expect([...LATENCY_BUCKETS_S].sort((a, b) => a - b)).toEqual(LATENCY_BUCKETS_S);
  });
});

describe("renderText (Prometheus text format 0.0.4)", () => {
  const h = new Histogram([0.5, 2]);
  h.observe(0.25);
  h.observe(1);
  h.observe(5);
  const families: MetricFamily[] = [
    {
      name: "x_requests_total",
      help: 'Requests.\nBy "outcome" \\ backend.',
      type: "counter",
      samples: [
        { labels: { group: 'we"ird\\name\nline', backend: "a" }, value: 3 },
        { labels: { group: "g", backend: "b" }, value: 0 },
      ],
    },
    { name: "x_up", help: "Up.", type: "gauge", samples: [{ labels: {}, value: 1 }, { labels: { group: "n" }, value: Number.NaN }] },
    { name: "x_latency_seconds", help: "Latency.", type: "histogram", samples: [{ labels: { group: "g" }, histogram: h.snapshot() }] },
    { name: "x_empty_total", help: "Nothing yet.", type: "counter", samples: [] },
  ];
  const text = renderText(families);
  const lines = text.split("\n");

  it("writes HELP and TYPE once per family, before its samples", () => {
    for (const name of ["x_requests_total", "x_up", "x_latency_seconds", "x_empty_total"]) {
      expect(lines.filter((l) => l.startsWith(`# HELP ${name} `))).toHaveLength(1);
      expect(lines.filter((l) => l.startsWith(`# TYPE ${name} `))).toHaveLength(1);
      const first = lines.findIndex((l) => !l.startsWith("#") && l.startsWith(name));
      if (first >= 0) expect(lines.indexOf(`# TYPE ${name} ${families.find((f) => f.name === name)?.type}`)).toBeLessThan(first);
    }
  });

  it("escapes label values (backslash, quote, line feed) and help text (backslash, line feed)", () => {
    expect(text).toContain('x_requests_total{group="we\\"ird\\\\name\\nline",backend="a"} 3\n');
    expect(text).toContain('# HELP x_requests_total Requests.\\nBy "outcome" \\\\ backend.\n');
    expect(text).toContain('x_up 1\nx_up{group="n"} NaN\n');
  });

  it("writes a histogram's buckets cumulatively with le, then +Inf equal to its count, then _sum and _count", () => {
    expect(text).toContain(
      [
        'x_latency_seconds_bucket{group="g",le="0.5"} 1',
        'x_latency_seconds_bucket{group="g",le="2"} 2',
        'x_latency_seconds_bucket{group="g",le="+Inf"} 3',
        'x_latency_seconds_sum{group="g"} 6.25',
        'x_latency_seconds_count{group="g"} 3',
      ].join("\n"),
    );
  });

  it("ends with a line feed and has no blank line", () => {
    expect(text.endsWith("\n")).toBe(true);
    expect(lines.slice(0, -1).every((l) => l.length > 0)).toBe(true);
    expect(renderText([])).toBe("");
  });
});

describe("renderStream: renderText's text, a chunk at a time", () => {
  async function chunksOf(stream: ReadableStream<Uint8Array>): Promise<Uint8Array[]> {
    const chunks: Uint8Array[] = [];
    const reader = stream.getReader();
    for (let read = await reader.read(); !read.done; read = await reader.read()) chunks.push(read.value);
    return chunks;
  }
  const h = new Histogram([0.5, 2]);
  h.observe(1);
  const many = (name: string, n: number): MetricFamily => ({ name, help: `${n} series.`, type: "counter", samples: Array.from({ length: n }, (_, i) => ({ labels: { group: "gé", key: `key_${i}` }, value: i * 1.5 })) });
  const families: MetricFamily[] = [
    { name: "x_up", help: 'Up.\n"quoted" \\', type: "gauge", samples: [{ labels: {}, value: 1 }, { labels: { group: 'we"ird\\name\nline' }, value: Number.NaN }] },
    many("x_keys_total", 5_000),
    { name: "x_latency_seconds", help: "Latency.", type: "histogram", samples: [{ labels: { group: "g" }, histogram: h.snapshot() }] },
    { name: "x_empty_total", help: "Nothing yet.", type: "counter", samples: [] },
    many("x_more_total", 3_000),
  ];

  it("has the same bytes as renderText's text in UTF-8, over several chunks each ending at a line feed", async () => {
    const chunks = await chunksOf(renderStream(families));
    expect(chunks.length).toBeGreaterThan(2);
    expect(chunks.every((c) => c.at(-1) === 0x0a)).toBe(true);
    expect(Buffer.concat(chunks).equals(Buffer.from(renderText(families), "utf8"))).toBe(true);
    expect(await chunksOf(renderStream([]))).toEqual([]);
  });

  it("takes the families as far as its reader has come, and no further once the reader cancels", async () => {
    let taken = 0;
    let ended = false;
    function* oneByOne(): Generator<MetricFamily> {
      try {
        for (let i = 0; i < 100; i++) {
          taken++;
          yield many(`x_${i}_total`, 1_000);
        }
      } finally {
        ended = true;
      }
    }
    const reader = renderStream(oneByOne()).getReader();
    expect((await reader.read()).done).toBe(false);
    expect(taken).toBeLessThan(5);
    await reader.cancel();
    expect(ended).toBe(true);
    expect(taken).toBeLessThan(5);
  });
});
