import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT, runScript, type ScriptRun } from "../support/run-script.ts";

// Each test starts Node processes: on a shared 2-core machine that can take a while.
const SPAWN_TIMEOUT_MS = 60_000;

/** Every bench command (package.json's scripts), its entry, and a bad value it refuses with the message it gives. */
const COMMANDS: { name: string; script: string; bad: string[]; message: string }[] = [
  { name: "bench:routing", script: "bench/routing/run.ts", bad: ["--seeds", "0"], message: '--seeds takes a positive integer, not "0"' },
  { name: "bench:routing-replicas", script: "bench/routing/replicas.ts", bad: ["--instances", "0"], message: '--instances takes a positive integer, not "0"' },
  { name: "bench:routing-feedback", script: "bench/routing/feedback.ts", bad: ["--draws", "4"], message: "--draws: only with --virtual" },
  { name: "bench:routing-virtual", script: "bench/virtual/run.ts", bad: ["--strategy", "best"], message: '--strategy: "best" is not one of' },
  { name: "bench:overhead", script: "bench/overhead/run.ts", bad: ["--scenarios", "none"], message: "no scenario matches none" },
  { name: "bench:ceiling", script: "bench/ceiling/run.ts", bad: ["--target", "nope", "--no-write"], message: '--target: "nope" is not one of' },
  { name: "bench:chaos", script: "bench/chaos/run.ts", bad: ["--max-tokens", "0"], message: '--max-tokens takes an integer from 1 to 1024, not "0"' },
  { name: "bench:input", script: "bench/input-cost/run.ts", bad: ["--repeats", "0"], message: '--repeats takes a positive integer, not "0"' },
  { name: "bench:route-memory", script: "bench/route-memory/run.ts", bad: ["--no-write=yes"], message: "--no-write takes no value" },
  { name: "bench:registry", script: "bench/registry/run.ts", bad: ["--repeats", "x"], message: '--repeats takes a positive integer, not "x"' },
  { name: "bench:route-object", script: "bench/route-object/run.ts", bad: ["--seconds", "0"], message: '--seconds takes a positive number, not "0"' },
  { name: "bench:profile", script: "bench/profile/run.ts", bad: ["--target", "floor"], message: '--target takes one of kvgate, kvgate-nolog, kvgate-restamp, kvgate-key, ceiling, not "floor"' },
  { name: "bench:processes", script: "bench/processes/run.ts", bad: ["--requests", "10"], message: "--requests takes at least 200" },
];

/** The tools run with `node` (their READMEs' command lines), as they are invoked, and a bad command line each refuses. */
const TOOLS: { name: string; script: string; bad: string[]; message: string }[] = [
  { name: "traces", script: "bench/traces/cli.ts", bad: ["nope"], message: '"nope" is not a trace kind (multi-turn|' },
  { name: "replay", script: "bench/replay/cli.ts", bad: ["--kind", "mooncake", "--poisson"], message: "--poisson needs --rate or --load" },
  { name: "measure-throughput", script: "bench/fleet/measure-throughput.ts", bad: ["--workers", "0"], message: '--workers takes a positive integer, not "0"' },
];

/** A usage error: exit 2, one line on stderr that names the command and says `message`, no stack, nothing on stdout. */
function expectUsageError(run: ScriptRun, name: string, message: string): void {
  expect(run.code, run.stderr).toBe(2);
  const lines = run.stderr.trimEnd().split("\n");
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(new RegExp(`^${name}: `));
  expect(lines[0]).toContain(message);
  expect(run.stderr).not.toContain("    at ");
  expect(run.stdout).toBe("");
}

/** What bench/results holds, with each file's modification time: a command that ran would change it. */
async function results(): Promise<string[]> {
  const dir = join(ROOT, "bench", "results");
  const names = await readdir(dir);
  return Promise.all(names.map(async (n) => `${n} ${(await stat(join(dir, n))).mtimeMs}`));
}

describe("every bench command's command line", () => {
  it("lists every bench script of package.json", async () => {
    const pkg = JSON.parse(await readFile(join(ROOT, "package.json"), "utf8")) as { scripts: Record<string, string> };
    const benches = Object.keys(pkg.scripts).filter((s) => s.startsWith("bench:"));
    expect(COMMANDS.map((c) => c.name).sort()).toEqual(benches.sort());
    for (const c of COMMANDS) expect(pkg.scripts[c.name]).toMatch(new RegExp(`node (--expose-gc )?${c.script}$`));
  });

  for (const { name, script, bad, message } of COMMANDS) {
    describe(name, () => {
      it("says an unknown flag in one line naming the command, exit 2, no stack trace", async () => {
        expectUsageError(await runScript(script, ["--bogus"]), name, "unknown argument --bogus (");
      }, SPAWN_TIMEOUT_MS);

      it(`says a bad value (${bad.join(" ")}) in one line, exit 2`, async () => {
        expectUsageError(await runScript(script, bad), name, message);
      }, SPAWN_TIMEOUT_MS);

      it("prints its usage for --help and -h, exit 0, running nothing", async () => {
        const before = await results();
        for (const flag of ["--help", "-h"]) {
          const run = await runScript(script, [flag]);
          expect(run.code, run.stderr).toBe(0);
          expect(run.stdout).toMatch(new RegExp(`^usage: npm run ${name} -- .*--`));
          expect(run.stdout.trimEnd().split("\n")).toHaveLength(1);
          // Nothing started: a fleet, a gateway or a load would log on stderr.
          expect(run.stderr).toBe("");
        }
        // --help wins over another flag's complaint.
        const helped = await runScript(script, ["--bogus", "--help"]);
        expect(helped.code, helped.stderr).toBe(0);
        expect(await results()).toEqual(before);
      }, SPAWN_TIMEOUT_MS);
    });
  }

  it('bench:routing-virtual says --regime open-loop in one line: an open-loop trace is named by --trace', async () => {
    expectUsageError(await runScript("bench/virtual/run.ts", ["--regime", "open-loop"]), "bench:routing-virtual", '--regime: "open-loop" is not one of roomy, pressured (an open-loop trace is run with --trace mooncake or b2b-saas)');
  }, SPAWN_TIMEOUT_MS);
});

describe("the tools run with node", () => {
  for (const { name, script, bad, message } of TOOLS) {
    it(`${name}: --help prints its usage as it is invoked; a bad command line (${bad.join(" ")}) is one line, exit 2`, async () => {
      for (const flag of ["--help", "-h"]) {
        const run = await runScript(script, [flag]);
        expect(run.code, run.stderr).toBe(0);
        expect(run.stdout).toMatch(new RegExp(`^usage: node ${script} `));
        expect(run.stderr).toBe("");
      }
      expectUsageError(await runScript(script, ["--bogus"]), name, "unknown argument --bogus");
      expectUsageError(await runScript(script, bad), name, message);
    }, SPAWN_TIMEOUT_MS);
  }
});
