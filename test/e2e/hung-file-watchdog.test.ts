import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import type { HungReport } from "../support/hung-file-watchdog.ts";
import { runScript } from "../support/run-script.ts";
import { useTempDir } from "../support/temp-dir.ts";

// Once in CI a Workers test file never ended and the job ran into its own limit, saying nothing of
// where. A blocked isolate is such a file: vitest's own timeout cannot reach it. This runs vitest,
// as npm test does, on a Workers project with one, under a 5 s limit.
const dir = useTempDir("kvgate-hung-");

describe("the hung-file watchdog", () => {
  it("stops a Workers test file whose isolate is blocked, names it, and lets the run end", { timeout: 120_000 }, async () => {
    const report = join(dir(), "report.json");
    const r = await runScript("node_modules/vitest/vitest.mjs", ["run", "--config", "test/fixtures/hung-isolate/vitest.config.ts"], {
      KVGATE_TEST_FILE_LIMIT_S: "5",
      KVGATE_HUNG_REPORT: report,
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/\[hung-file-watchdog\] test\/fixtures\/hung-isolate\/blocked\.test\.ts: no progress in 5 s \(KVGATE_TEST_FILE_LIMIT_S\)/);
    // The other file ran and passed: the run went on.
    expect(r.stdout).toMatch(/1 passed/);
    const written = JSON.parse(await readFile(report, "utf8")) as HungReport;
    expect(written).toEqual({ stopped: ["test/fixtures/hung-isolate/blocked.test.ts"], failed: [] });
  });
});
