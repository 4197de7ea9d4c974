import { describe, expect, it } from "vitest";
import { runScript } from "../support/run-script.ts";

// Each test starts Node processes: on a shared 2-core machine that can take a while.
const SPAWN_TIMEOUT_MS = 60_000;

describe("the open-loop command lines", () => {
  it("bench/traces/cli.ts prints a Mooncake slice's ceiling and the speed factor for a target load", async () => {
    const run = await runScript("bench/traces/cli.ts", ["mooncake", "--file", "conversation", "--minutes", "10", "--load", "0.8"]);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain("1750 requests");
    expect(run.stdout).toContain("kv ceiling (one infinite cache, arrival order): 0.289");
    expect(run.stdout).toMatch(/for load 0\.8: --speed 0\.98\d/);
  }, SPAWN_TIMEOUT_MS);

  it("bench/replay/cli.ts replays a Mooncake slice open-loop and prints the summary as JSON", async () => {
    // No --base-url: one in-process instant worker. A 12-second slice, 20 times faster.
    const run = await runScript("bench/replay/cli.ts", ["--kind", "mooncake", "--file", "synthetic", "--minutes", "0.2", "--speed", "20", "--max-in-flight", "64"]);
    expect(run.code, run.stderr).toBe(0);
    const summary = JSON.parse(run.stdout) as Record<string, unknown>;
    expect(summary).toMatchObject({ kind: "mooncake", arrivals: { mode: "trace", speed: 20 }, errors: 0, overflow: 0, cut: 0, first_error: null });
    expect(summary.completed).toBe(summary.requests);
    expect(summary.requests).toBeGreaterThan(20);
    expect(summary).toHaveProperty("goodput.slo_ttft_ms", 2000);
    expect(summary).toHaveProperty("queueing.server.failed_reads", 0);
  }, SPAWN_TIMEOUT_MS);

  it("refuses a load target without a GPU preset to compute it for", async () => {
    const run = await runScript("bench/replay/cli.ts", ["--kind", "mooncake", "--minutes", "1", "--load", "0.8"]);
    expect(run.code).not.toBe(0);
    expect(run.stderr).toContain("--load needs the fleet's GPU preset");
  }, SPAWN_TIMEOUT_MS);
});

describe("bench/replay/cli.ts's flags", () => {
  it("refuses an unknown flag and a bad count in the benchmarks' words, before replaying anything", async () => {
    const unknown = await runScript("bench/replay/cli.ts", ["--kind", "rag", "--bogus", "1"]);
    expect(unknown.code).not.toBe(0);
    expect(unknown.stderr).toContain("unknown argument --bogus");
    const count = await runScript("bench/replay/cli.ts", ["--kind", "rag", "--sessions", "many"]);
    expect(count.code).not.toBe(0);
    expect(count.stderr).toContain('--sessions takes a positive integer, not "many"');
  }, SPAWN_TIMEOUT_MS);
});
