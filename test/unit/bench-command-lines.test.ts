import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { runScript } from "../support/run-script.ts";

// Each test starts Node processes: on a shared 2-core machine that can take a while.
const SPAWN_TIMEOUT_MS = 60_000;

/** Runs a script that should refuse its command line: non-zero exit, `message` on stderr, nothing done. */
async function refused(script: string, args: string[], message: string): Promise<void> {
  const run = await runScript(script, args);
  expect(run.code).not.toBe(0);
  expect(run.stderr).toContain(message);
  expect(run.stdout).toBe("");
}

describe("bench/traces/cli.ts for session traces", () => {
  it("takes every trace option in kebab-case or camelCase, and --out", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kvgate-trace-"));
    try {
      const out = join(dir, "trace.json");
      const kebab = await runScript("bench/traces/cli.ts", ["multi-turn", "--sessions", "2", "--turns=3", "--system-kb", "1", "--out", out]);
      expect(kebab.code, kebab.stderr).toBe(0);
      expect(kebab.stdout).toContain("multi-turn: 2 sessions, 6 requests");
      expect(kebab.stdout).toContain('"systemKB":1');
      expect(JSON.parse(await readFile(out, "utf8"))).toHaveProperty("params.systemKB", 1);
      const camel = await runScript("bench/traces/cli.ts", ["multi-turn", "--sessions", "2", "--turns", "3", "--systemKB", "1"]);
      expect(camel.code, camel.stderr).toBe(0);
      expect(camel.stdout).toContain('"systemKB":1');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }, SPAWN_TIMEOUT_MS);

  it("refuses an unknown option, a missing value and a value that is not a number, naming the flag", async () => {
    await refused("bench/traces/cli.ts", ["rag", "--sesions", "2"], "traces: unknown argument --sesions (<multi-turn|rag|");
    await refused("bench/traces/cli.ts", ["rag", "--sessions"], "--sessions needs a value");
    await refused("bench/traces/cli.ts", ["rag", "--document-kb", "big"], '--document-kb takes a number, not "big"');
  }, SPAWN_TIMEOUT_MS);

  it("names the kinds when the first word is not one", async () => {
    await refused("bench/traces/cli.ts", ["--sessions", "2"], "traces: unknown argument --sessions (<multi-turn|rag|");
    await refused("bench/traces/cli.ts", ["sessions"], 'traces: "sessions" is not a trace kind (multi-turn|rag|');
  }, SPAWN_TIMEOUT_MS);
});

describe("the open-loop trace flags", () => {
  it("refuse a b2b-saas option without its value and an unknown flag", async () => {
    await refused("bench/traces/cli.ts", ["b2b-saas", "--b2b", "stages"], "--b2b stages needs a value: --b2b stages=N");
    await refused("bench/traces/cli.ts", ["mooncake", "--minute", "1"], "traces: unknown argument --minute (mooncake [--file value]");
  }, SPAWN_TIMEOUT_MS);
});

describe("each benchmark refuses a flag it does not know before it starts anything", () => {
  const scripts: [string, string][] = [
    ["bench/input-cost/run.ts", "--repeats N --requests N --baseline DIR --only a,b --no-write"],
    ["bench/registry/run.ts", "--repeats N, --no-write"],
    ["bench/route-memory/run.ts", "--no-write"],
    ["bench/route-object/run.ts", "--repeats N --seconds S --no-write"],
    ["bench/fleet/measure-throughput.ts", "--workers N --concurrency N --seconds S --max-requests N"],
    ["bench/processes/run.ts", "--processes N --requests N --prompt-kb K --baseline DIR --no-write"],
  ];
  for (const [script, usage] of scripts) {
    it(script, () => refused(script, ["--bogus"], `unknown argument --bogus (${usage})`), SPAWN_TIMEOUT_MS);
  }

  it("npm run fleet says what is wrong in one line and exits 2", async () => {
    const run = await runScript("bench/fleet/cli.ts", ["--workers", "2", "--wrokers", "3"]);
    expect(run.code).toBe(2);
    expect(run.stderr.trim()).toBe("fleet: unknown argument --wrokers (see --help)");
  }, SPAWN_TIMEOUT_MS);
});

describe("bench/profile/run.ts", () => {
  it("refuses an unknown target, an interval out of range and an unknown flag before it starts anything", async () => {
    await refused("bench/profile/run.ts", ["--target", "floor"], '--target takes one of kvgate, kvgate-nolog, kvgate-restamp, kvgate-key, ceiling, not "floor"');
    await refused("bench/profile/run.ts", ["--interval", "5"], '--interval takes an integer from 50 to 10000, not "5"');
    await refused("bench/profile/run.ts", ["--sample", "1"], "unknown argument --sample");
  }, SPAWN_TIMEOUT_MS);
});
