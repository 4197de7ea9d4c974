import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import type { ReplicaResults } from "../../bench/routing/replicas-types.ts";
import { runScript } from "../support/run-script.ts";
import { isWorkerdNoise } from "../support/workerd-noise.ts";

/**
 * `npm run bench:routing-replicas` as its user runs it, at the smallest size that still routes:
 * kvgate's gateway as one instance and as two behind the fan-out, in front of a fresh simulated
 * fleet each, two sessions of two turns. It writes the results and the report, and the report
 * renders again from the results alone.
 */

const out = await mkdtemp(join(tmpdir(), "kvgate-replicas-"));
afterAll(async () => {
  await rm(out, { recursive: true, force: true });
});

describe("bench:routing-replicas", () => {
  it("replays the trace through 1 and 2 kvgate instances and writes routing-replicas.json and .md", { timeout: 180_000 }, async () => {
    const run = await runScript("bench/routing/replicas.ts", ["--out", out, "--instances", "1,2", "--sessions", "2", "--seeds", "1", "--turns", "2", "--routers", "prefix-aware"]);
    // Nothing on stderr but what workerd marks as no error (an alarm run late on a loaded machine).
    expect(run.stderr.split("\n").filter((line) => line !== "" && !isWorkerdNoise(`${line}\n`))).toEqual([]);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/\[1\/2 \d+s\] 2s seed1 prefix-aware\s+×1 kv_hit 0\.\d{3} /);
    expect(run.stdout).toMatch(/\[2\/2 \d+s\] 2s seed1 prefix-aware\s+×2 kv_hit 0\.\d{3} .* instances 0\.\d\d\/[01]\.\d\d\n/);

    const results = JSON.parse(await readFile(join(out, "routing-replicas.json"), "utf8")) as ReplicaResults;
    expect(results.command).toBe("npm run bench:routing-replicas -- --out " + out + " --instances 1,2 --sessions 2 --seeds 1 --turns 2 --routers prefix-aware");
    expect(results.trace).toBe("multi-turn");
    expect(results.regime).toMatchObject({ name: "roomy", preset: "a100-7b", workers: 4 });
    expect(results.ceilings).toEqual([{ sessions: 2, seed: 1, kv_hit: expect.any(Number) }]);
    expect(results.runs.map((r) => [r.router, r.instances, r.sessions, r.seed, r.requests, r.errors])).toEqual([
      ["prefix-aware", 1, 2, 1, 4, 0],
      ["prefix-aware", 2, 2, 1, 4, 0],
    ]);
    for (const r of results.runs) {
      // The second turn finds the first one's prefix on its backend, whichever instance it reached.
      expect(r.kv_hit).toBeGreaterThan(0.3);
      expect(r.ttft_ms.p50).toBeGreaterThan(0);
      expect(r.ttft_ms.p95).toBeGreaterThanOrEqual(r.ttft_ms.p50 as number);
      expect(r.instance_share).toHaveLength(r.instances);
      expect(r.instance_share.reduce((a, b) => a + b, 0)).toBeCloseTo(1, 9);
    }

    const report = await readFile(join(out, "routing-replicas.md"), "utf8");
    expect(report).toContain("# Routing across gateway instances");
    expect(report).toMatch(/\| prefix-aware \| 2 \| 0\.\d{3} · \d+ \/ \d+ \|/);
    expect(report).toMatch(/\| prefix-aware \| \d\.\d{3} \(2 sessions\) \|/);

    await writeFile(join(out, "routing-replicas.md"), "");
    const again = await runScript("bench/routing/replicas.ts", ["--out", out, "--report-only"]);
    expect(again.code).toBe(0);
    expect(await readFile(join(out, "routing-replicas.md"), "utf8")).toBe(report);
  });

  it("refuses a count that is not a positive integer, naming the flag", async () => {
    const run = await runScript("bench/routing/replicas.ts", ["--out", out, "--instances", "1,0"]);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain('--instances takes a positive integer, not "0"');
  });
});
