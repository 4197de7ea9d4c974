import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { typeDeopts } from "../support/deopts.ts";
import { ROOT } from "../support/run-script.ts";

/** A Node child that loads TypeScript and writes a deopt trace: seconds on a loaded machine, past vitest's default 5 s. */
const SPAWN_TIMEOUT_MS = 60_000;

/**
 * The hasher's loop runs once per character of every prompt, and the Worker makes a new hasher per
 * request: what a new hasher holds must not be what the loop's optimised code did not expect. Its
 * lanes were seeded above 2^31 (not int32), and V8 deoptimised the loop on new hashers for it; in
 * workerd's V8 an empty `[]` of hashes changing kind at its first hash did too, and in about two
 * of five gateway processes V8 then left the loop unoptimised for good (README, Benchmarks →
 * Gateway processes). This runs test/support/hash-prompts.ts, which hashes 400 varied prompts as
 * the Worker does, under V8's --trace-deopt, on the Node that runs the tests (whose V8 shows the
 * first; test/e2e/block-hasher-jit.test.ts watches workerd's).
 */
describe("the block hasher under V8", () => {
  it("is not deoptimised for a type its optimised code did not expect", async () => {
    const { stdout } = await promisify(execFile)(process.execPath, ["--trace-deopt", "test/support/hash-prompts.ts"], { cwd: ROOT, maxBuffer: 64 << 20 });
    expect(typeDeopts(stdout.split("\n"), ["push", "hashInto", "boundary", "finish", "fmix32"])).toEqual([]);
  }, SPAWN_TIMEOUT_MS);
});
