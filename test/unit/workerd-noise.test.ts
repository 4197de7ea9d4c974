import { Writable } from "node:stream";
import { Miniflare, convertV4MiniflareOptions } from "miniflare";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import quietWorkerd from "../support/quiet-workerd.ts";
import { dropWorkerdNoise, isWorkerdNoise } from "../support/workerd-noise.ts";

// A Worker that meets, in real workerd run verbose as the Workers test pool runs it, what the
// tests cause on purpose (an upstream that refuses the connection) beside what must still show.
const SCRIPT = `
export default {
  async fetch(req, env, ctx) {
    const path = new URL(req.url).pathname;
    if (path === "/refused") {
      try { await fetch("http://127.0.0.1:1/"); } catch (e) { return new Response(e.message); }
    }
    if (path === "/console") { console.error("kvgate: a line the Worker logs"); return new Response("ok"); }
    if (path === "/wait-until") { ctx.waitUntil(Promise.reject(new Error("a release that failed"))); return new Response("ok"); }
    return new Response("?", { status: 404 });
  },
};`;

let mf: Miniflare;
const records: string[] = [];

/**
 * The records one request leaves, as the pool writes them (message and "\\n"). They come over
 * workerd's pipe at its own pace: wait until those `expected` have come, then until none has come
 * for a while (after a fixed sleep, a late record could fall into the next request's records).
 */
async function recordsOf(path: string, expected: string[]): Promise<string[]> {
  const from = records.length;
  await (await mf.dispatchFetch(`http://worker${path}`)).text();
  await vi.waitFor(() => {
    for (const e of expected) expect(records.slice(from).join("")).toContain(e);
  }, { timeout: 10_000, interval: 20 });
  for (let seen = -1; seen !== records.length; ) {
    seen = records.length;
    await new Promise((r) => setTimeout(r, 300));
  }
  return records.slice(from);
}

beforeAll(async () => {
  mf = new Miniflare(
    convertV4MiniflareOptions({
      verbose: true,
      modules: true,
      script: SCRIPT,
      compatibilityDate: "2025-01-01",
      handleStructuredLogs: ({ message }) => records.push(`${message}\n`),
    }),
  );
  await mf.ready;
}, 30_000);
afterAll(() => mf.dispose());

describe("workerd's noise", () => {
  it("is every record of a connection the test breaks on purpose", async () => {
    const refused = await recordsOf("/refused", ["disconnected: Connection refused", "Network connection lost."]);
    expect(refused.join("")).toContain("disconnected: Connection refused");
    expect(refused.join("")).toContain("Network connection lost.");
    expect(refused.filter((r) => !isWorkerdNoise(r))).toEqual([]);
  });

  it("is never the Worker's own console, nor an exception of another kind", async () => {
    const logged = await recordsOf("/console", ["kvgate: a line the Worker logs"]);
    expect(logged).toEqual(["kvgate: a line the Worker logs\n"]);
    expect(isWorkerdNoise(logged[0] as string)).toBe(false);

    const failed = await recordsOf("/wait-until", ["a release that failed"]);
    expect(failed.join("")).toContain("a release that failed");
    expect(failed.filter((r) => !isWorkerdNoise(r)).join("")).toContain("failed: jsg.Error: a release that failed");
  });
});

describe("dropWorkerdNoise", () => {
  it("drops noise from a stream and passes the rest, callbacks included, until stopped", async () => {
    const written: string[] = [];
    const out = new Writable({ write: (chunk: Buffer, _enc, done) => (written.push(chunk.toString()), done()) });
    const stop = dropWorkerdNoise(out);
    const noise = "exception = kj/async-io.c++:763: disconnected: read end of pipe was aborted\nstack: workerd@3addb41\n";
    await new Promise<void>((done) => out.write(noise, () => done()));
    out.write("✓ a test line\n");
    stop();
    out.write(noise);
    expect(written).toEqual(["✓ a test line\n", noise]);
  });
});

describe("the Workers project's global setup", () => {
  it("filters the run's stdout and stderr until its teardown, and not at all with KVGATE_TEST_LOGS=1", () => {
    const [out, err] = [process.stdout.write, process.stderr.write];
    const teardown = quietWorkerd();
    expect(process.stdout.write).not.toBe(out);
    expect(process.stderr.write).not.toBe(err);
    teardown();
    expect([process.stdout.write, process.stderr.write]).toEqual([out, err]);

    const before = process.env.KVGATE_TEST_LOGS;
    process.env.KVGATE_TEST_LOGS = "1";
    try {
      quietWorkerd();
      expect([process.stdout.write, process.stderr.write]).toEqual([out, err]);
    } finally {
      if (before === undefined) delete process.env.KVGATE_TEST_LOGS;
      else process.env.KVGATE_TEST_LOGS = before;
    }
  });
});
