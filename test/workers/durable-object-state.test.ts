import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import type { RouteDecision, RouteRefusal, VersionRefusal } from "../../src/routing/protocol.ts";
import { EVENTUALLY, firstRouteCall, groupConfig, routeCall, status } from "./gateway.ts";

/** The Durable Object's own state: what it stores (issue 10 §4). */

function decided(d: RouteDecision | RouteRefusal | VersionRefusal): RouteDecision {
  if ("refused" in d) throw new Error(`refused: ${d.refused}`);
  return d;
}

/** Bytes a stored value takes, near enough: typed arrays by their bytes, text as UTF-8, 8 a number. */
function storedBytes(v: unknown): number {
  if (ArrayBuffer.isView(v)) return v.byteLength;
  if (typeof v === "string") return new TextEncoder().encode(v).length;
  if (v === null || typeof v !== "object") return 8;
  let n = 0;
  for (const [k, x] of Object.entries(v)) n += k.length + storedBytes(x);
  return n;
}

/** A SQLite-backed Durable Object refuses a value over 2 MB in production (not enforced locally); kvgate keeps each under this. */
const PIECE_LIMIT = 128 * 1024;

describe("the affinity snapshot", () => {
  it("is stored in pieces of at most 128 KiB however many backends there are, and restored whole", async () => {
    const name = "many-backends";
    const g = groupConfig(name);
    const stub = env.MODEL_GROUP.getByName(name);
    // An 8,192-block prompt for each of the 80 backends, all in flight at once: each goes to the
    // backend with the least prompt work queued, so every backend learns one.
    const leases: string[] = [];
    for (let i = 0; i < g.deployments.length; i++) {
      const chain = Array.from({ length: 8192 }, (_, k) => (i + 1) * 10_000_000 + k);
      leases.push(decided(await stub.route(i === 0 ? firstRouteCall(g, chain) : routeCall(g, chain))).lease);
    }
    await stub.release(
      leases.map((lease) => ({ lease, outcome: "ok" as const })),
      [],
    );
    expect((await status(name)).backends.every((b) => b.prefixBlocks === 8192)).toBe(true);

    const stored = () => runInDurableObject(stub, async (_o, state) => [...(await state.storage.list()).entries()].map(([key, v]) => ({ key, bytes: storedBytes(v) })));
    // The alarm saves it snapshotIntervalMs (20 ms) after the routing.
    await vi.waitFor(async () => expect((await stored()).filter((s) => s.key.startsWith("affinity:"))).toHaveLength(80), EVENTUALLY);
    const values = await stored();
    // As one value it would be past the limit.
    expect(values.reduce((n, s) => n + s.bytes, 0)).toBeGreaterThan(2 * 1024 * 1024);
    for (const s of values) expect(s.bytes, s.key).toBeLessThanOrEqual(PIECE_LIMIT);

    await evictDurableObject(stub);
    const after = await status(name);
    expect(after.restored.affinityBlocks).toBe(80 * 4096);
    expect(after.backends.every((b) => b.prefixBlocks === 4096)).toBe(true);
  });
});
