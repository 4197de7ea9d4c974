import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname } from "node:path";
import { describe, expect, it } from "vitest";
import { ROOT } from "../support/run-script.ts";

/** Runs `code` (an ES module) in a fresh Node process from the repository; its stdout. */
function runModule(code: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ["--input-type=module", "-e", code], { cwd: ROOT, env: { ...process.env, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false" }, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  return new Promise((done, fail) => {
    child.once("error", fail);
    child.once("close", (exit) => done({ code: exit, stdout, stderr }));
  });
}

describe("the gateway's bundle for tests and benchmarks", () => {
  // Every test run and benchmark bundles the Worker (about 1.5 MB); left behind, a machine that
  // runs the suite daily fills its temporary folder.
  it("is removed when the process that built it exits", async () => {
    const run = await runModule(`
      import { existsSync } from "node:fs";
      const { buildGateway } = await import("./bench/harness/gateway.ts");
      const script = await buildGateway();
      if (!existsSync(script)) throw new Error("no bundle at " + script);
      console.log(script);
    `);
    expect(run.code, run.stderr).toBe(0);
    const script = run.stdout.trim().split("\n").at(-1) as string;
    expect(script).toMatch(/kvgate-bundle-[^/]+\/index\.js$/);
    expect(existsSync(dirname(script))).toBe(false);
  }, 120_000);
});
