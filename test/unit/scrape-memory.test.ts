import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { metricFamilies } from "../../src/metrics/group-metrics.ts";
import { renderText } from "../../src/metrics/prometheus-text.ts";
import { metricsResponse } from "../../src/metrics/scrape-response.ts";
import { scrapeOf, type ScrapeSize } from "./fixtures/scrape-inputs.ts";

interface Run {
  heldMb?: number;
  bytes?: number;
  keySeries?: number;
  tail?: string;
  /** The process ended with an error; `outOfMemory`: its heap reached its limit. */
  failed: boolean;
  outOfMemory: boolean;
}

const CHILD = fileURLToPath(new URL("./fixtures/scrape-memory-child.ts", import.meta.url));

/** test/unit/fixtures/scrape-memory-child.ts in a process whose heap (its old generation: what outlives a few allocations) is `limitMb`, if any. */
function inProcess(size: ScrapeSize, render: boolean, limitMb?: number): Promise<Run> {
  const flags = ["--expose-gc", "--max-semi-space-size=4", ...(limitMb !== undefined ? [`--max-old-space-size=${limitMb}`] : [])];
  const child = spawn(process.execPath, [...flags, CHILD, JSON.stringify(size), ...(render ? ["render"] : [])], { stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-4096)));
  return new Promise((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => {
      const run: Run = { failed: code !== 0, outOfMemory: err.includes("heap out of memory") };
      for (const line of out.split("\n")) if (line.startsWith("{")) Object.assign(run, JSON.parse(line));
      resolve(run);
    });
  });
}

describe("GET /metrics' answer", () => {
  it("is the text of every family at once, streamed: groups of several shards with keys, and groups that did not answer", async () => {
    const groups = scrapeOf({ groups: 2, shards: 3, keys: 2_000, backends: 3 });
    const res = metricsResponse(groups, ["down"]);
    expect(res.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const text = renderText(metricFamilies(groups, ["down"]));
    expect(text.split("\n").filter((l) => l.startsWith("kvgate_key_requests_total{"))).toHaveLength(12_000);
    expect(await res.text()).toBe(text);
  });
});

describe("GET /metrics: the heap a scrape's text takes", () => {
  // A group of 8 shards whose objects each count 10,000 keys (the most an object counts): 80,000 key series.
  // Their answers hold ~34 MB; the text once took 164 MB more (every family's samples, then every line, then the
  // text, at once), the whole scrape 198 MB: past a Worker's 128 MB. Streamed a family at a time: ~23 MB more.
  const size: ScrapeSize = { groups: 1, shards: 8, keys: 10_000, backends: 4 };
  const RENDER_MB = 32;

  it(`renders 80,000 key series within ${RENDER_MB} MB of heap beyond what the objects' answers hold`, { timeout: 120_000 }, async () => {
    const held = await inProcess(size, false);
    expect(held).toMatchObject({ failed: false, heldMb: expect.any(Number) });
    const scrape = await inProcess(size, true, Math.ceil(held.heldMb as number) + RENDER_MB);
    expect({ failed: scrape.failed, outOfMemory: scrape.outOfMemory, keySeries: scrape.keySeries, tail: scrape.tail }).toEqual({ failed: false, outOfMemory: false, keySeries: 80_000, tail: "" });
    expect(scrape.bytes).toBeGreaterThan(80_000 * 6 * 60);
  });
});
