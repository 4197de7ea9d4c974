import { existsSync } from "node:fs";
import { dirname } from "node:path";
import { describe, expect, it } from "vitest";
import { runNode } from "../support/run-script.ts";

describe("the gateway's bundle for tests and benchmarks", () => {
  // Every test run and benchmark bundles the Worker (about 1.5 MB); left behind, a machine that
  // runs the suite daily fills its temporary folder.
  it("is removed when the process that built it exits", async () => {
    const run = await runNode(["--input-type=module", "-e", `
      import { existsSync } from "node:fs";
      const { buildGateway } = await import("./bench/harness/gateway.ts");
      const script = await buildGateway();
      if (!existsSync(script)) throw new Error("no bundle at " + script);
      console.log(script);
    `]);
    expect(run.code, run.stderr).toBe(0);
    const script = run.stdout.trim().split("\n").at(-1) as string;
    expect(script).toMatch(/kvgate-bundle-[^/]+\/index\.js$/);
    expect(existsSync(dirname(script))).toBe(false);
  }, 120_000);
});
