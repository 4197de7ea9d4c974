import { describe, expect, it } from "vitest";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import type { Strategy } from "../../src/config/schema.ts";
import { GroupRouter } from "../../src/routing/group-router.ts";
import type { LimitRefusal, RouteDecision, RouteRefusal, SpillLimit, VersionRefusal } from "../../src/routing/protocol.ts";
import { PendingPrefills } from "../../src/routing/pending-prefills.ts";
import { PrefixSet } from "../../src/routing/prefix-set.ts";
import { SharedWorkingSet } from "../../src/routing/shared-working-set.ts";

function group(over: Record<string, unknown> = {}, backends = 4, deployment: Record<string, unknown> = {}): ResolvedGroup {
  const deployments = Array.from({ length: backends }, (_, i) => ({ id: `b${i}`, baseUrl: `http://127.0.0.1:${9001 + i}`, model: "m", ...deployment }));
  const r = parseConfig({ modelGroups: [{ name: "g", deployments, ...over }] });
  if (!r.ok) throw new Error(r.error);
  return r.config.groups[0] as ResolvedGroup;
}

/** Seeded so tie-breaks are reproducible. */
function rng(seed = 1): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

/** A router that knows one version of the group and routes with it. */
function routerFor(g: ResolvedGroup, random = rng()): GroupRouter & { pick(chain: number[], now: number, exclude?: string[]): RouteDecision | RouteRefusal | LimitRefusal | VersionRefusal } {
  const router = new GroupRouter(g.name, random);
  router.install(g, 0);
  return Object.assign(router, { pick: (chain: number[], now: number, exclude: string[] = []) => router.route(g.version, chain, exclude, now) });
}

/** The decision, or null when the router refused (every backend unusable). */
function pick(d: RouteDecision | RouteRefusal | LimitRefusal | VersionRefusal): RouteDecision | null {
  return "refused" in d ? null : d;
}

const chain = (prefix: number, n: number) => Array.from({ length: n }, (_, i) => prefix * 1_000_000 + i);

/**
 * The traffic the copy-pricing tests share: ten unrelated 100-block prompts, each done before the
 * next (filling a small cache), then a 30-block prefix: a document two questions lead with
 * (`shared`), or one conversation's prompt. `send` routes a chain a step later than the last.
 */
function holdPrefix(send: (c: number[]) => RouteDecision | null, done: (d: RouteDecision | null) => void, shared: boolean) {
  for (let k = 0; k < 10; k++) done(send(chain(200 + k, 100)));
  const prefix = chain(1, 30);
  const first = send(shared ? [...prefix, ...chain(2, 2)] : prefix);
  done(first);
  const second = shared ? send([...prefix, ...chain(4, 2)]) : null;
  if (shared) done(second);
  return { prefix, first, second };
}

describe("PrefixSet", () => {
  it("finds the longest leading match", () => {
    const s = new PrefixSet(100);
    s.learn([1, 2, 3, 4]);
    expect(s.match([1, 2, 3, 4, 5])).toBe(4);
    expect(s.match([1, 2, 9])).toBe(2);
    expect(s.match([7])).toBe(0);
    expect(s.match([])).toBe(0);
  });

  it("knows which blocks another chain continues past", () => {
    const s = new PrefixSet(100);
    s.learn([1, 2, 3]);
    expect([1, 2, 3].map((h) => s.isInterior(h))).toEqual([true, true, false]);
    s.learn([1, 2, 3, 4]);
    expect(s.isInterior(3)).toBe(true);
    s.learn([1, 2]);
    expect(s.isInterior(2)).toBe(true);
  });

  it("exports its most recent blocks and loads them back with their interior marks", () => {
    const a = new PrefixSet(100);
    a.learn(chain(1, 10));
    a.learn([...chain(1, 5), ...chain(2, 3)]);
    const b = new PrefixSet(100);
    b.importRecent(a.exportRecent(100));
    expect(b.values()).toEqual(a.values());
    expect(b.match([...chain(1, 5), ...chain(2, 3)])).toBe(8);
    expect(b.isInterior(chain(1, 5)[4] as number)).toBe(true);
    expect(b.isInterior(chain(1, 10)[9] as number)).toBe(false);
    // A snapshot of the newest 6 is still prefix-closed: the shared root survives, deep blocks go.
    const c = new PrefixSet(100);
    c.importRecent(a.exportRecent(6));
    expect(c.match(chain(1, 10))).toBeGreaterThanOrEqual(3);
  });

  it("stays bounded and prefix-closed under eviction", () => {
    const s = new PrefixSet(50);
    const r = rng(7);
    const chains = Array.from({ length: 40 }, (_, k) => chain(k, 1 + Math.floor(r() * 30)));
    for (let step = 0; step < 500; step++) {
      const c = chains[Math.floor(r() * chains.length)] as number[];
      s.learn(c);
      expect(s.size).toBeLessThanOrEqual(50);
      for (const other of chains) {
        const m = s.match(other);
        // Every block up to the match is present, none is missing below it.
        for (let i = 0; i < m; i++) expect(s.match(other.slice(0, i + 1))).toBe(i + 1);
      }
    }
  });
});

describe("PendingPrefills", () => {
  it("counts a match as computed up to the first block still being prefilled", () => {
    const p = new PendingPrefills();
    const c = chain(1, 10);
    expect(p.ready(c, 10, 0)).toBe(10);
    p.add(6, c[6] as number, 100);
    p.add(3, c[3] as number, 50);
    expect(p.ready(c, 10, 0)).toBe(3);
    expect(p.ready(c, 5, 0)).toBe(3);
    expect(p.ready(c, 3, 0)).toBe(3);
    expect(p.ready(c, 10, 60)).toBe(6);
    expect(p.ready(c, 10, 100)).toBe(10);
    // Another chain from that depth on is not held up by it.
    expect(p.ready([...c.slice(0, 3), ...chain(2, 7)], 10, 0)).toBe(10);
  });

  it("forgets an entry when its request ended, and keeps a later one that took its place", () => {
    const p = new PendingPrefills();
    const c = chain(1, 4);
    const n = p.add(0, c[0] as number, 1000);
    p.done(n);
    expect(p.ready(c, 4, 0)).toBe(4);
    const first = p.add(0, c[0] as number, 1000);
    for (let i = 0; i < 16; i++) p.add(2, c[2] as number, 1000);
    p.done(first);
    expect(p.ready(c, 4, 0)).toBe(2);
  });
});

describe("SharedWorkingSet", () => {
  it("counts each shared prefix once, for as long as it is matched, within its bound", () => {
    const w = new SharedWorkingSet(3);
    w.matched(1, 40, 0, 1000);
    w.matched(2, 10, 100, 1000);
    w.matched(1, 40, 500, 1000);
    expect(w.blocks).toBe(50);
    // Prefix 2 was last matched at 100: gone after 1,100; prefix 1 stays until 1,500.
    w.expire(1200, 1000);
    expect(w.blocks).toBe(40);
    w.matched(3, 5, 1300, 1000);
    w.matched(4, 5, 1300, 1000);
    // A fourth prefix takes the place of the least recently matched one.
    w.matched(5, 5, 1300, 1000);
    expect(w.blocks).toBe(15);
  });
});

describe("GroupRouter", () => {
  it("sends the same prefix back to the backend that saw it (prefix-hit)", () => {
    const router = routerFor(group(), rng());
    const first = pick(router.pick(chain(1, 20), 0));
    if (!first) throw new Error("no route");
    expect(first.reason).toBe("least-loaded");
    router.release({ lease: first.lease, outcome: "ok" }, 0);
    // One at a time, a second apart: each prompt's prefill has drained before the next comes.
    for (let i = 0; i < 5; i++) {
      const d = pick(router.pick([...chain(1, 20), 99 + i], 1000 * (i + 1)));
      expect(d?.backendId).toBe(first.backendId);
      expect(d?.reason).toBe("prefix-hit");
      expect(d?.matched).toBe(20);
      expect(d?.total).toBe(21);
      router.release({ lease: d?.lease ?? "", outcome: "ok" }, 0);
    }
  });

  it("spreads different prefixes across backends", () => {
    const router = routerFor(group(), rng(3));
    const used = new Set<string>();
    for (let k = 0; k < 4; k++) used.add(pick(router.pick(chain(k, 10), 0))?.backendId ?? "none");
    expect(used.size).toBe(4);
  });

  it("puts no more than `saturation` in flight on a backend in a burst of one prefix", () => {
    const router = routerFor(group({ saturation: 4 }), rng(5));
    const reasons = new Set<string>();
    for (let i = 0; i < 16; i++) reasons.add(pick(router.pick(chain(1, 30), 0))?.reason ?? "none");
    expect(router.snapshot().map((b) => b.inFlight)).toEqual([4, 4, 4, 4]);
    expect(reasons.has("prefix-hit")).toBe(true);
  });

  // With the defaults the valve (saturation 256) is also the hard cap (maxInFlight 256): a backend
  // at it may take nothing, yet what it holds is why the request went elsewhere.
  it.each([
    ["the defaults (saturation = maxInFlight = 256)", {}, {}, 256],
    ["saturation = maxInFlight = 8", { saturation: 8 }, { maxInFlight: 8 }, 8],
  ])("labels a request moved off the full backend holding its prefix saturated-spill with %s", (_, over, deployment, full) => {
    const router = routerFor(group({ hotThreshold: 0, ...over }, 2, deployment), rng());
    const prompt = chain(7, 50);
    const first = pick(router.pick(prompt, 0));
    for (let n = 1; n < full; n++) expect(pick(router.pick(prompt, n))?.backendId).toBe(first?.backendId);
    const spilled = pick(router.pick(prompt, full));
    expect(spilled?.backendId).not.toBe(first?.backendId);
    // What the backend that took it holds: none of the prompt.
    expect([spilled?.reason, spilled?.matched, spilled?.total]).toEqual(["saturated-spill", 0, 50]);
  });

  it("keeps a cached prompt on its backend below the valve however many more it has in flight: queued prompt work, not the count, moves it", () => {
    // balanceAbs and balanceRel bound a sharded group's shards; prefix-aware's pick does not read them.
    const router = routerFor(group({ saturation: 100, balanceAbs: 2, balanceRel: 1.5, hotThreshold: 0 }), rng(9));
    const first = pick(router.pick(chain(1, 30), 0));
    const reasons: string[] = [];
    // Later, its prompt long prefilled, the same prompt comes back while the first ones are still in flight (decoding).
    for (let i = 0; i < 6; i++) reasons.push(pick(router.pick(chain(1, 30), 10_000 + i * 1_000))?.reason ?? "none");
    expect(reasons).toEqual(Array(6).fill("prefix-hit"));
    expect(router.snapshot().find((b) => b.id === first?.backendId)?.inFlight).toBe(7);
  });

  it("spreads a hot prefix over the fleet instead of piling it onto the first backend", () => {
    const router = routerFor(group({ saturation: 100 }), rng(11));
    const system = chain(7, 40);
    const reasons: string[] = [];
    // Eight requests share a long system prompt, each with its own question; all stay in flight.
    for (let q = 0; q < 8; q++) reasons.push(pick(router.pick([...system, 9000 + q], 0))?.reason ?? "none");
    const loads = router.snapshot().map((b) => b.inFlight);
    expect(Math.max(...loads) - Math.min(...loads)).toBeLessThanOrEqual(1);
    expect(reasons).toContain("hot-spread");
    // Every backend now holds the prompt: later requests find it wherever load sends them.
    expect(router.snapshot().every((b) => b.prefixBlocks >= 40)).toBe(true);
  });

  it("sends a new conversation on a known system prompt to an idle backend, at its first repeat", () => {
    const router = routerFor(group({ saturation: 100, hotThreshold: 0 }), rng(17));
    const system = chain(7, 40);
    const first = pick(router.pick([...system, ...chain(100, 3)], 0));
    const second = pick(router.pick([...system, ...chain(101, 3)], 0));
    expect(second?.backendId).not.toBe(first?.backendId);
    expect(second?.reason).toBe("hot-spread");
    // The same prompt again, once prefilled, is no branch: it stays where it was.
    const again = pick(router.pick([...system, ...chain(100, 3)], 10_000));
    expect(again?.backendId).toBe(first?.backendId);
    expect(again?.reason).toBe("prefix-hit");
  });

  it("sends a new conversation on a known system prompt to an idle backend after prompts too short to leave a KV block", () => {
    // bench:routing warms each gateway up with 8 tiny prompts, one block of 64 characters each,
    // then opens its sessions, which the gateway routes a request at a time. Counted as new
    // prompts, the tiny ones made the system prompt's 1 of 10 too small a share to copy; by the
    // second session the first backend's queue had drained below the system prompt, and the second
    // session went behind it: 4 sessions on 2 backends for the whole run.
    const router = routerFor(group({ saturation: 100, hotThreshold: 0 }, 4, { prefillTokensPerSec: 10_000 }), rng(17));
    for (let k = 0; k < 8; k++) {
      const tiny = pick(router.pick([9_000_000 + k], 0));
      router.release({ lease: tiny?.lease ?? "", outcome: "ok" }, 5);
    }
    const system = chain(7, 40);
    const first = pick(router.pick([...system, ...chain(100, 3)], 500));
    // 10 ms later 100 of its 688 tokens are prefilled: its backend's queue is below the 40-block system prompt.
    const second = pick(router.pick([...system, ...chain(101, 3)], 510));
    expect(second?.backendId).not.toBe(first?.backendId);
    expect(second?.reason).toBe("hot-spread");
  });

  it("keeps a conversation on its backend although its system prompt is hot", () => {
    const router = routerFor(group({ saturation: 100 }), rng(13));
    const system = chain(7, 40);
    const sessions = [0, 1, 2, 3, 4, 5].map((s) => [...system, ...chain(100 + s, 3)]);
    const home = sessions.map((c) => pick(router.pick(c, 0))?.backendId);
    for (let turn = 1; turn <= 3; turn++) {
      sessions.forEach((c, s) => {
        c.push(...chain(200 + s * 10 + turn, 3));
        const d = pick(router.pick(c, turn * 10_000));
        expect(d?.backendId).toBe(home[s]);
        expect(d?.reason).toBe("prefix-hit");
      });
    }
  });

  it("spreads a burst of new prompts by the prompt work queued on each backend, not by in-flight count", () => {
    // 10,000 tokens/s at 64 chars (16 tokens) a block: 0.625 blocks drain per ms.
    const router = routerFor(group({ saturation: 100, balanceAbs: 100 }), rng(21));
    // Backends 1-3 are busy decoding three long answers each; backend 0 just went idle.
    for (let i = 0; i < 9; i++) pick(router.pick(chain(50 + i, 2), 0));
    const decoding = router.snapshot();
    const idle = decoding.reduce((a, b) => (b.inFlight < a.inFlight ? b : a)).id;
    // 1 s later their prompts are long prefilled; four unique 40-block prompts arrive at once.
    const burst = [0, 1, 2, 3].map((k) => pick(router.pick(chain(300 + k, 40), 1000))?.backendId);
    // Least-loaded would send all four to the idle backend, to be prefilled one after another.
    expect(burst[0]).toBe(idle);
    expect(new Set(burst).size).toBe(4);
    expect(router.snapshot().map((b) => b.prefillDebtBlocks)).toEqual([40, 40, 40, 40]);
  });

  it("queues a prompt's whole size when its chain was cut at maxPrefixBlocks, so the prompts after it do not land behind its prefill", () => {
    const g = group({ maxPrefixBlocks: 40 });
    const router = new GroupRouter(g.name, rng(3));
    router.install(g, 0);
    // A 400-block prompt (a 100k-token document) whose chain stops at 40 blocks.
    const long = router.route(g.version, chain(1, 40), [], 0, undefined, false, 400);
    const busy = pick(long)?.backendId;
    expect(router.snapshot().find((b) => b.id === busy)?.prefillDebtBlocks).toBe(400);
    // Twelve 40-block prompts at once fill the other three backends' queues to 160 blocks before one joins the long prompt's.
    const next = Array.from({ length: 12 }, (_, k) => pick(router.route(g.version, chain(10 + k, 40), [], 0))?.backendId);
    expect(next).not.toContain(busy);
    // A size below the chain's length, or not a finite number, is the chain's.
    const g2 = group({ maxPrefixBlocks: 40 });
    const other = new GroupRouter(g2.name, rng(3));
    other.install(g2, 0);
    for (const [k, size] of [7, Infinity, Number.NaN].entries()) {
      const d = pick(other.route(g2.version, chain(100 + k, 40), [], 0, undefined, false, size));
      expect(other.snapshot().find((b) => b.id === d?.backendId)?.prefillDebtBlocks).toBe(40);
    }
  });

  it("weighs a cut prompt's cached head against its whole size: a long prompt's few cached blocks do not outweigh a shorter queue", () => {
    const g = group({ maxPrefixBlocks: 40 }, 2);
    // P (150 blocks, its chain cut at 40) goes to one backend, Q (100) to the other; then R repeats P's head.
    const place = (size: number) => {
      const router = new GroupRouter(g.name, rng(5));
      router.install(g, 0);
      const p = pick(router.route(g.version, chain(1, 40), [], 0, undefined, false, 150));
      pick(router.route(g.version, chain(2, 40), [], 0, undefined, false, 100));
      const r = pick(router.route(g.version, chain(1, 40), [], 0, undefined, false, size));
      return r?.backendId === p?.backendId;
    };
    // Sized as its chain, R's 40 cached blocks are all its prompt: worth the longer queue (150 against 100).
    expect(place(40)).toBe(true);
    // Sized whole (1,000 blocks), they save a twenty-fifth of its prefill: the shorter queue wins.
    expect(place(1000)).toBe(false);
  });

  it("tells a sharded group's Worker its least queue of prompt work, and passes a prompt on that would wait longer than the Worker's limit", () => {
    // 10,000 tokens/s at 16 tokens a block: a block takes 1.6 ms.
    const g = group({ shards: 2 }, 2);
    const router = routerFor(g, rng(4));
    const first = pick(router.route(g.version, chain(1, 40), [], 0, undefined, false, 1000));
    expect(first?.waitMs).toBe(0);
    expect(first?.blockMs).toBeCloseTo(1.6);
    const second = pick(router.pick(chain(2, 40), 0));
    expect(second?.backendId).not.toBe(first?.backendId);
    // The 1,000 blocks queued on one backend and the 40 on the other: 40 × 1.6 ms is the least.
    expect(second?.waitMs).toBeCloseTo(64);
    // A 100-block prompt would wait 64 + 160 ms at best: over a limit of 200 it is passed on, nothing taken.
    expect(router.route(g.version, chain(3, 40), [], 0, undefined, false, 100, { overMs: 200, spreadBlocks: 0 })).toEqual({ refused: "spill", rev: 0 });
    expect(router.leaseCount).toBe(2);
    expect(router.snapshot().map((b) => b.inFlight)).toEqual([1, 1]);
    // Under a limit of 250 it is routed, to the shorter queue.
    expect(pick(router.route(g.version, chain(3, 40), [], 0, undefined, false, 100, { overMs: 250, spreadBlocks: 0 }))?.backendId).toBe(second?.backendId);
    // One object for the group: its answers carry no queue for a Worker to weigh.
    expect(pick(routerFor(group({}, 2)).pick(chain(1, 40), 0))).not.toHaveProperty("waitMs");
  });

  it("gives a request for a priority server its place in that server's queue: its arrival plus its own uncached prefill there", () => {
    // 10,000 tokens/s at 16 tokens a block: a block takes 1.6 ms.
    const prio = group({ strategy: "prefix-aware" }, 1, { schedulingPolicy: "priority" });
    const router = routerFor(prio);
    // 40 blocks, none cached: 64 ms of prefill after its arrival at t = 1,000,000 ms.
    expect(pick(router.pick(chain(1, 40), 1_000_000))?.priority).toBe(1_000_064);
    // The same conversation a turn later: 40 of its 50 blocks cached, 10 to prefill.
    expect(pick(router.pick(chain(1, 50), 1_000_100))?.priority).toBe(1_000_116);
    // A prompt cut at the chain (1,000 blocks in all, 50 cached) pays for the whole of it.
    expect(pick(router.route(prio.version, chain(1, 50), [], 1_000_200, undefined, false, 1000))?.priority).toBe(1_000_200 + 1520);
    // Only for the server that takes it: a first-come-first-served one gets none, nor the version's hash a new field.
    const parsed = parseConfig({
      modelGroups: [{ name: "g", strategy: "round-robin", deployments: [{ id: "b0", baseUrl: "http://127.0.0.1:9001", model: "m", schedulingPolicy: "priority" }, { id: "b1", baseUrl: "http://127.0.0.1:9002", model: "m" }] }],
    });
    if (!parsed.ok) throw new Error(parsed.error);
    const mixed = routerFor(parsed.config.groups[0] as ResolvedGroup);
    const answers = [0, 1].map(() => pick(mixed.pick(chain(2, 8), 0)));
    expect(answers.map((a) => [a?.backendId, a?.priority])).toEqual([["b0", 13], ["b1", undefined]]);
    expect(group({}, 1).version).toBe(group({}, 1, { schedulingPolicy: "fcfs" }).version);
    expect(prio.version).not.toBe(group({ strategy: "prefix-aware" }, 1).version);
  });

  it("keeps the prompt work queued since a request when that request ends, so the next arrival does not land on a backend still prefilling", () => {
    // 10,000 tokens/s: 0.625 blocks drain per ms. Two backends, each with a request that ran its
    // course (its 40 blocks long prefilled); then one of them gets a new 40-block prompt.
    const router = routerFor(group({ saturation: 100, balanceAbs: 100 }, 2), rng(4));
    const old = [pick(router.pick(chain(1, 40), 0)), pick(router.pick(chain(2, 40), 0))];
    const fresh = pick(router.pick(chain(3, 40), 2000));
    const x = fresh?.backendId === "b0" ? 0 : 1;
    const y = 1 - x;
    const debts = () => router.snapshot().map((b) => b.prefillDebtBlocks);
    // Its old request ends: prefilled long ago, and so was all that came before it — not the
    // prompt routed since, which the backend is prefilling now.
    router.release({ lease: old.find((d) => d?.backendId === fresh?.backendId)?.lease ?? "", outcome: "ok", ttftMs: 70 }, 2001);
    expect(debts()[x]).toBe(39);
    // So the next prompt goes to the other backend, though this one now has fewer in flight.
    expect(pick(router.pick(chain(4, 40), 2002))?.backendId).toBe(`b${y}`);
    // A request that ends with its own prompt prefilled clears all queued before it.
    const behind = pick(router.pick(chain(5, 40), 2003));
    expect(behind?.backendId).toBe(`b${x}`);
    router.release({ lease: behind?.lease ?? "", outcome: "ok", ttftMs: 90 }, 2010);
    expect(debts()[x]).toBe(0);
    // One that left before its first token was dropped by the engine: only its own work goes.
    const placed = [chain(6, 40), chain(7, 40), chain(8, 40)].map((c) => pick(router.pick(c, 2020)));
    expect(placed.map((d) => d?.backendId)).toEqual([`b${x}`, `b${y}`, `b${x}`]);
    router.release({ lease: placed[2]?.lease ?? "", outcome: "client-abort" }, 2020);
    expect(debts()[x]).toBe(40);
  });

  it("breaks ties between equally cheap backends in turn, not toward the one whose requests just ended", () => {
    const router = routerFor(group({ saturation: 100, balanceAbs: 100 }, 3), rng(8));
    // Three prompts at once: one a backend, by the work each adds; the turn then comes back to b0.
    const first = [1, 2, 3].map((k) => pick(router.pick(chain(k, 40), 0)));
    expect(first.map((d) => d?.backendId)).toEqual(["b0", "b1", "b2"]);
    // b1's request ends; by t=500 every prompt is prefilled: all three cost the same.
    router.release({ lease: first[1]?.lease ?? "", outcome: "ok", ttftMs: 60 }, 500);
    // Fewest in flight would say b1 (least-loaded's convoy); in turn says b0, then b1, then b2.
    const next = [4, 5, 6].map((k) => pick(router.pick(chain(k, 40), 500))?.backendId);
    expect(next).toEqual(["b0", "b1", "b2"]);
  });

  it("counts what is left of the work queued after an ended request as of the release, not as of the last route call", () => {
    // 0.625 blocks drain per ms. A (40 blocks) then B (40) on one backend at t=0; A's answer ends at
    // t=40 with no route call since: B has had 40 ms of the 64 it needs, 15 blocks left.
    const router = routerFor(group({ saturation: 100, balanceAbs: 100 }, 1), rng(2));
    pick(router.pick(chain(1, 40), 0));
    const a = pick(router.pick(chain(2, 40), 0));
    const b = pick(router.pick(chain(3, 40), 0));
    router.release({ lease: a?.lease ?? "", outcome: "ok", ttftMs: 30 }, 40);
    // At most B's 40 as of t=40 — and at t=41 a block less before the next prompt's 40 join it
    // (draining from t=0 again would leave 54).
    expect(router.snapshot()[0]?.prefillDebtBlocks).toBe(40);
    pick(router.pick(chain(4, 40), 41));
    expect(router.snapshot()[0]?.prefillDebtBlocks).toBe(79);
    // B leaves at t=60 before its first token: of the 67.5 blocks left, its own 27.5 go.
    router.release({ lease: b?.lease ?? "", outcome: "client-abort" }, 60);
    expect(router.snapshot()[0]?.prefillDebtBlocks).toBe(40);
  });

  it("spreads the opening burst of conversations on one system prompt by the work queued, though the first came earlier", () => {
    // An A100's 11,905 tokens/s: 0.74 blocks drain per ms. One conversation opens alone; 27 ms
    // later fifteen more open at once on the same 97-block system prompt, each with its own question.
    const router = routerFor(group({ saturation: 100 }, 4, { prefillTokensPerSec: 11_905 }), rng(5));
    const system = chain(7, 97);
    const placed: string[] = [];
    for (let s = 0; s < 16; s++) placed.push(pick(router.pick([...system, ...chain(100 + s, 8 + (s % 5))], s === 0 ? 0 : 27))?.backendId ?? "none");
    // A conversation queued on the first backend waits for what is left of its system prompt's
    // prefill and then reuses it; elsewhere it prefills the whole prompt. So the first backend
    // takes a few more of the burst, and every backend some.
    const counts = ["b0", "b1", "b2", "b3"].map((id) => placed.filter((b) => b === id).length);
    const firstAt = Number(placed[0]?.slice(1));
    expect(Math.min(...counts)).toBeGreaterThanOrEqual(3);
    expect(counts[firstAt]).toBe(Math.max(...counts));
    const debts = router.snapshot().map((b) => b.prefillDebtBlocks);
    // Each backend's queued work within one conversation's prompt of the others'.
    expect(Math.max(...debts) - Math.min(...debts)).toBeLessThanOrEqual(97 + 12);
  });

  it("sends a repeat of a prompt still being prefilled to the backend prefilling it: it waits there no longer than a copy would take, and adds no work", () => {
    const router = routerFor(group({ saturation: 100, hotThreshold: 0 }, 2), rng(3));
    const first = pick(router.pick(chain(1, 40), 0));
    const meanwhile = pick(router.pick(chain(1, 40), 1));
    expect(meanwhile?.backendId).toBe(first?.backendId);
    expect(meanwhile?.reason).toBe("prefix-hit");
    const debts = router.snapshot().map((b) => b.prefillDebtBlocks);
    expect(Math.max(...debts)).toBeLessThanOrEqual(40);
  });

  it("takes a conversation's history as computed once its turn ended, however slow the estimate", () => {
    // 10 tokens/s: by the estimate a 43-block prompt takes 69 s to prefill.
    const router = routerFor(group({ saturation: 100, balanceAbs: 100, hotThreshold: 0 }, 2, { prefillTokensPerSec: 10 }), rng(7));
    const convo = chain(1, 43);
    const turn0 = pick(router.pick(convo, 0));
    const home = turn0?.backendId ?? "";
    const other = home === "b0" ? "b1" : "b0";
    // Another prompt waits at home (20 blocks of work), and the turn is answered.
    pick(router.pick(chain(2, 20), 10, [other]));
    router.release({ lease: turn0?.lease ?? "", outcome: "ok" }, 2000);
    // Its next turn: 3 new blocks behind 20 at home, or all 46 elsewhere.
    const turn1 = pick(router.pick([...convo, ...chain(3, 3)], 2001));
    expect(turn1?.backendId).toBe(home);
    expect(turn1?.reason).toBe("prefix-hit");
    expect(turn1?.matched).toBe(43);
  });

  it("takes a conversation's history as computed when its next turn comes, before the last turn's release arrives", () => {
    // Another isolate may send the next turn before this one's release reaches the object: the
    // client has the answer, so the prompt was computed, whatever the (slow) estimate says.
    const router = routerFor(group({ saturation: 100, balanceAbs: 100, hotThreshold: 0 }, 2, { prefillTokensPerSec: 10 }), rng(7));
    const convo = chain(1, 43);
    const home = pick(router.pick(convo, 0))?.backendId ?? "";
    const turn1 = pick(router.pick([...convo, ...chain(3, 3)], 50));
    expect(turn1?.backendId).toBe(home);
    expect(turn1?.reason).toBe("prefix-hit");
    // The same prompt again at once is no conversation coming back: it is computed again anyway.
    const again = pick(router.pick(convo, 60));
    expect(again?.backendId).not.toBe(home);
  });

  it("keeps each of many group prompts where it is cached, however roomy the caches: none carries a backend's share of the new prompts", () => {
    // llm-d's b2b-saas in small: 30 groups, each a 40-block prompt its questions share (1,200 blocks
    // in all, a 100,000-block cache each). Round one opens each group, 20 ms apart. In round two a
    // 2-block question of each group comes every 2 ms, a backend's groups one after another, so its
    // queue grows meanwhile: copying a group's prompt to a shorter queue would pay off for that one
    // question, and give each group a place in every backend's cache.
    const router = routerFor(group({ saturation: 100, hotThreshold: 0 }, 4, { kvCapacityBlocks: 100_000 }), rng(29));
    const groups = Array.from({ length: 30 }, (_, g) => chain(500 + g, 40));
    const home = groups.map((prompt, g) => pick(router.pick([...prompt, ...chain(600 + g, 2)], g * 20))?.backendId ?? "");
    const order = groups.map((_, g) => g).sort((a, b) => (home[a] as string).localeCompare(home[b] as string));
    const placed = order.map((g, k) => {
      const d = pick(router.pick([...(groups[g] as number[]), ...chain(700 + g, 2)], 10_000 + k * 2));
      return { reason: d?.reason, home: d?.backendId === home[g] };
    });
    expect(placed.every((p) => p.reason === "prefix-hit" && p.home)).toBe(true);
  });

  it("calls a move off one of many group prompts load-balanced, not hot-spread: it was not copied as a shared prefix", () => {
    const router = routerFor(group({ saturation: 100, hotThreshold: 0 }, 2), rng(37));
    const groups = Array.from({ length: 30 }, (_, g) => chain(500 + g, 40));
    let t = 0;
    const ask = (g: number, q: number) => pick(router.pick([...(groups[g] as number[]), ...chain(q, 2)], (t += 1000)));
    groups.forEach((_, g) => router.release({ lease: ask(g, 600 + g)?.lease ?? "", outcome: "ok" }, t));
    // A second question on group 0's prompt: now a shared prefix, one of thirty.
    const second = ask(0, 650);
    router.release({ lease: second?.lease ?? "", outcome: "ok" }, t);
    expect(second?.reason).toBe("prefix-hit");
    for (let k = 0; k < 50; k++) {
      const doc = pick(router.pick(chain(100 + k, 200), (t += 1000)));
      if (doc?.backendId === second?.backendId) break;
      router.release({ lease: doc?.lease ?? "", outcome: "ok" }, t);
    }
    // Its backend now has a 200-block document queued: the third question is prefilled elsewhere, prompt and all.
    const third = pick(router.pick([...(groups[0] as number[]), ...chain(651, 2)], t + 1));
    expect(third?.backendId).not.toBe(second?.backendId);
    expect(third?.reason).toBe("load-balanced");
  });

  it("leaves a warm backend whose queued prompt work outweighs the cache it would reuse", () => {
    const router = routerFor(group({ saturation: 100, balanceAbs: 100, hotThreshold: 0 }, 2), rng(23));
    const convo = [...chain(1, 30)];
    const first = pick(router.pick(convo, 0));
    const home = first?.backendId;
    router.release({ lease: first?.lease ?? "", outcome: "ok" }, 0);
    // Then its backend takes a 200-block document (320 ms of prefill at 0.625 blocks/ms).
    let t = 0;
    for (let k = 0; k < 50; k++) {
      const doc = pick(router.pick(chain(100 + k, 200), (t += 1000)));
      if (doc?.backendId === home) break;
      router.release({ lease: doc?.lease ?? "", outcome: "ok" }, 0);
    }
    // Right away the conversation would wait behind 200 blocks to save 30: it goes to the other.
    convo.push(...chain(3, 2));
    const moved = pick(router.pick(convo, t + 1));
    expect(moved?.backendId).not.toBe(home);
    expect(moved?.reason).toBe("load-balanced");
    // Its history is now cached there too, and there it stays.
    convo.push(...chain(4, 2));
    const next = pick(router.pick(convo, t + 1000));
    expect(next?.backendId).toBe(moved?.backendId);
    expect(next?.reason).toBe("prefix-hit");
    expect(next?.matched).toBe(32);
  });

  it("copies a shared prompt to a shorter queue only while the cache it would go to has room; a conversation moves either way", () => {
    // The same traffic on roomy caches and on full ones: a backend holding a 30-block document two
    // questions have shared, and a 30-block conversation, takes a 100-block prompt just before the
    // next request of each. Waiting behind it costs 100 blocks, a copy elsewhere 32. With room
    // there both move. With that cache full, each of the document's 30 copied blocks evicts one a
    // later request prefills again, while it stays cached where it was for its other users: it
    // stays. The conversation takes its history with it (what it leaves is reused by no one).
    const nextAfterQueue = (kvCapacityBlocks: number, shared: boolean) => {
      const router = routerFor(group({ saturation: 100, balanceAbs: 100, hotThreshold: 0 }, 2, { kvCapacityBlocks }), rng(23));
      let t = 0;
      const done = (d: RouteDecision | null) => router.release({ lease: d?.lease ?? "", outcome: "ok" }, t);
      // The unrelated prompts put 500 blocks on each backend.
      const { prefix, first, second } = holdPrefix((c) => pick(router.pick(c, (t += 1000))), done, shared);
      if (shared) expect(second?.backendId).toBe(first?.backendId);
      for (let k = 0; k < 50; k++) {
        const doc = pick(router.pick(chain(100 + k, 100), (t += 1000)));
        if (doc?.backendId === first?.backendId) break;
        done(doc);
      }
      const next = pick(router.pick([...prefix, ...chain(3, 2)], t + 1));
      return { moved: next?.backendId !== first?.backendId, reason: next?.reason };
    };
    expect(nextAfterQueue(65_536, true)).toEqual({ moved: true, reason: "load-balanced" });
    expect(nextAfterQueue(400, true)).toEqual({ moved: false, reason: "prefix-hit" });
    expect(nextAfterQueue(400, false)).toEqual({ moved: true, reason: "load-balanced" });
  });

  it("prices a shared prompt's copy when a shard would pass it on, as it does between its own backends", () => {
    // One shard's one backend (10,000 tokens/s, 16-token blocks: 1.6 ms a block) holds a 30-block
    // document two questions have shared, or a 30-block conversation, behind a 100-block prompt:
    // the next request of each waits (100 + 2) × 1.6 = 163 ms there, over the Worker's 120 ms
    // for the next shard. With room in the caches both are passed on. With them full, the
    // document's copy on the next shard evicts 30 blocks another request prefills again
    // (3 × 30 × 1.6 = 144 ms more): it stays — unless the Worker says every shard holds it (a
    // system prompt it spreads over them), or all but 5 of its blocks (24 ms more): then it goes.
    // The conversation takes its history along: it goes.
    const spills = (kvCapacityBlocks: number, shared: boolean, spreadBlocks = 0) => {
      const g = group({ saturation: 100, balanceAbs: 100, hotThreshold: 0 }, 1, { kvCapacityBlocks });
      const router = new GroupRouter(g.name, rng(7));
      router.install(g, 0);
      let t = 0;
      const send = (c: number[], spill?: SpillLimit) => router.route(g.version, c, [], t, undefined, false, undefined, spill);
      const done = (d: RouteDecision | null) => router.release({ lease: d?.lease ?? "", outcome: "ok" }, t);
      const { prefix } = holdPrefix(
        (c) => {
          t += 1000;
          return pick(send(c));
        },
        done,
        shared,
      );
      t += 1000;
      send(chain(100, 100));
      const next = send([...prefix, ...chain(3, 2)], { overMs: 120, spreadBlocks });
      return "refused" in next ? next.refused : next.reason;
    };
    expect(spills(65_536, true)).toBe("spill");
    expect(spills(400, true)).toBe("prefix-hit");
    expect(spills(400, false)).toBe("spill");
    expect(spills(400, true, 30)).toBe("spill");
    expect(spills(400, true, 25)).toBe("spill");
    expect(spills(400, true, 10)).toBe("prefix-hit");
  });

  it("skips backends a request already failed on, and says why when none is left", () => {
    const router = routerFor(group({}, 3, { maxInFlight: 1 }), rng(29));
    for (let i = 0; i < 20; i++) {
      const d = pick(router.pick(chain(i, 5), 0, ["b0", "b2"]));
      expect(d?.backendId).toBe("b1");
      router.release({ lease: d?.lease ?? "", outcome: "ok" }, 0);
    }
    expect(router.pick(chain(1, 5), 0, ["b0", "b1", "b2"])).toEqual({ refused: "no-backend", rev: 0 });
    // Every backend usable but full (maxInFlight 1): at capacity, not unhealthy.
    for (let i = 0; i < 3; i++) router.pick(chain(1, 5), 0);
    expect(router.pick(chain(1, 5), 0)).toEqual({ refused: "at-capacity", rev: 0 });
  });

  it("sends nothing to a backend whose circuit opened, until it half-opens", () => {
    const router = routerFor(group({ strategy: "round-robin", breaker: { consecutiveFailures: 2, openMs: 1000, probeIntervalMs: 100 } }, 2), rng(31));
    for (let i = 0; i < 4; i++) {
      const d = pick(router.pick([], 10 * i));
      router.release({ lease: d?.lease ?? "", outcome: d?.backendId === "b0" ? "upstream-error" : "ok" }, 10 * i + 5);
    }
    expect(router.snapshot()[0]?.breaker.state).toBe("open");
    const during = [0, 1, 2, 3].map(() => pick(router.pick([], 500))?.backendId);
    expect(during).toEqual(["b1", "b1", "b1", "b1"]);
    // Due a probe while open; past openMs it takes a trial again.
    expect(router.dueProbes(600).map((p) => p.url)).toEqual(["http://127.0.0.1:9001/health"]);
    const later = [0, 1, 2, 3].map(() => pick(router.pick([], 1100))?.backendId);
    expect(later).toContain("b0");
    expect(router.snapshot()[0]?.breaker.state).toBe("half-open");
  });

  describe("a non-streamed answer cut by nonStreamTimeoutMs (src/routing/silence.ts)", () => {
    const timedOut = (lease: string) => ({ lease, outcome: "client-abort" as const, timedOut: true as const });
    const wedgeRouter = () => routerFor(group({ strategy: "round-robin", nonStreamTimeoutMs: 1000, breaker: { consecutiveFailures: 1, openMs: 60_000 } }, 2), rng(31));
    /** One request to each backend, sent at `at`: [b0's lease, b1's lease]. */
    const both = (router: ReturnType<typeof wedgeRouter>, at: number) => {
      const leases = [pick(router.pick([], at)), pick(router.pick([], at))].map((d) => d as RouteDecision);
      return leases.sort((x, y) => x.backendId.localeCompare(y.backendId)).map((d) => d.lease);
    };
    const state = (router: ReturnType<typeof wedgeRouter>) => router.snapshot().map((b) => b.breaker.state);

    it("is its backend's failure when the backend served nothing since it was sent while another did", () => {
      const router = wedgeRouter();
      const [wedged, other] = both(router, 0);
      router.release({ lease: other as string, outcome: "ok", ttftMs: 5 }, 10);
      router.release(timedOut(wedged as string), 1000);
      expect(state(router)).toEqual(["open", "closed"]);
    });

    it("is the request's own when its backend served another request meanwhile", () => {
      const router = wedgeRouter();
      const [long, other] = both(router, 0);
      const [short, other2] = both(router, 100);
      for (const l of [other, other2]) router.release({ lease: l as string, outcome: "ok" }, 110);
      router.release({ lease: short as string, outcome: "ok" }, 120);
      router.release(timedOut(long as string), 1000);
      expect(state(router)).toEqual(["closed", "closed"]);
    });

    it("blames no one when no backend of the group served in that time (a workload longer than its timeout)", () => {
      const router = wedgeRouter();
      // b served once, longer ago than the timeout before the next two were sent.
      const [, early] = both(router, 0);
      router.release({ lease: early as string, outcome: "ok" }, 100);
      const [a, b] = both(router, 2000);
      router.release(timedOut(a as string), 3000);
      router.release(timedOut(b as string), 3000);
      expect(state(router)).toEqual(["closed", "closed"]);
    });

    it("a breaker its silence opened is not probed: an idle group's object is not woken for it, and traffic past openMs gives it its trials", () => {
      // A hung engine's health endpoint answers ok: a probe is no evidence for such a breaker, and
      // probing it would wake the object every probeIntervalMs for as long as no request came.
      const router = routerFor(group({ strategy: "round-robin", nonStreamTimeoutMs: 1000, breaker: { consecutiveFailures: 1, openMs: 5000, probeIntervalMs: 100 } }, 2), rng(31));
      const [wedged, other] = both(router, 0);
      router.release({ lease: other as string, outcome: "ok" }, 10);
      router.release(timedOut(wedged as string), 1000);
      expect(router.snapshot()[0]?.breaker).toMatchObject({ state: "open", silent: true });
      for (let t = 1000; t < 600_000; t += 100) expect(router.dueProbes(t)).toEqual([]);
      expect(router.nextWake()).toBeNull();
      const later = [0, 1].map(() => pick(router.pick([], 600_000))?.backendId);
      expect(later).toContain("b0");
      expect(router.snapshot()[0]?.breaker.state).toBe("half-open");
    });

    it("a stream still under way whose renewal said its first token came counts as served: a backend of long streams is not blamed", () => {
      const router = wedgeRouter();
      const [stream, other] = both(router, 0);
      const [slow] = both(router, 100);
      // The stream's release comes only at its end; its renewal, while it runs, says it is serving.
      router.renew({ lease: stream as string, version: "v1", backendId: "b0", serving: true }, 500);
      router.release({ lease: other as string, outcome: "ok" }, 600);
      router.release(timedOut(slow as string), 1100);
      expect(state(router)).toEqual(["closed", "closed"]);
    });

    it("a streamed first token counts as served, whatever became of its stream", () => {
      const router = wedgeRouter();
      const [long, other] = both(router, 0);
      const [streamed] = both(router, 100);
      router.release({ lease: other as string, outcome: "ok" }, 110);
      router.release({ lease: streamed as string, outcome: "client-abort", ttftMs: 20, streamed: true }, 130);
      router.release(timedOut(long as string), 1000);
      expect(state(router)[0]).toBe("closed");
    });
  });

  describe("a server-side failure judged the request's (src/routing/silence.ts, workers/gateway/held-failure.ts)", () => {
    // Two backends failed it alike: the Worker settles both leases as the request's. `viaGateway`: a proxy's 502 or 504.
    const failedAlike = (lease: string, failure: "server-error" | "not-served" | "credentials" = "server-error", viaGateway = true) => ({ lease, outcome: "rejected" as const, failure, ...(viaGateway ? { viaGateway: true as const } : {}) });
    const proxiedRouter = (consecutiveFailures: number) => routerFor(group({ strategy: "round-robin", breaker: { consecutiveFailures, openMs: 60_000 } }, 3), rng(37));
    /** One request to each backend, sent at `at`: their leases, by backend. */
    const each = (router: ReturnType<typeof proxiedRouter>, at: number) => {
      const leases = [0, 1, 2].map(() => pick(router.pick([], at)) as RouteDecision);
      return leases.sort((x, y) => x.backendId.localeCompare(y.backendId)).map((d) => d.lease);
    };
    const state = (router: GroupRouter) => router.snapshot().map((b) => b.breaker.state);

    it("is its backend's when it served nothing from the request's routing to its release while another backend served: a dead engine behind a proxy opens", () => {
      const router = proxiedRouter(2);
      for (const at of [0, 1000]) {
        const [dead1, dead2, live] = each(router, at);
        router.release({ lease: live as string, outcome: "ok" }, at + 5);
        router.release(failedAlike(dead1 as string), at + 10);
        router.release(failedAlike(dead2 as string), at + 10);
      }
      expect(state(router)).toEqual(["open", "open", "closed"]);
    });

    it("charges nothing for a lone poison request at low traffic: no other backend served meanwhile", () => {
      const router = proxiedRouter(1);
      for (const at of [0, 1000, 2000]) {
        const [a, b, c] = each(router, at);
        router.release(failedAlike(a as string), at + 10);
        router.release(failedAlike(b as string), at + 10);
        router.release({ lease: c as string, outcome: "client-abort" }, at + 10);
      }
      expect(state(router)).toEqual(["closed", "closed", "closed"]);
    });

    it("never opens a backend that serves others between its failures", () => {
      const router = proxiedRouter(2);
      for (const at of [0, 1000, 2000, 3000]) {
        const [a, b, c] = each(router, at);
        router.release({ lease: c as string, outcome: "ok" }, at + 5);
        router.release(failedAlike(a as string), at + 10);
        router.release(failedAlike(b as string), at + 10);
        // Each serves another request before the next poison one comes.
        const [a2, b2] = each(router, at + 500);
        router.release({ lease: a2 as string, outcome: "ok" }, at + 510);
        router.release({ lease: b2 as string, outcome: "ok" }, at + 510);
      }
      expect(state(router)).toEqual(["closed", "closed", "closed"]);
    });

    it("judges no engine's own 500: a flood of requests every engine fails on, beside long generations elsewhere, opens no healthy breaker (found by review)", () => {
      const router = proxiedRouter(2);
      // a and b hold long generations that never end in the test; c serves every 100 ms.
      const [a0, b0] = each(router, 0);
      expect([a0, b0].every(Boolean)).toBe(true);
      for (let at = 100; at <= 2000; at += 100) {
        const [a, b, c] = each(router, at);
        router.release({ lease: c as string, outcome: "ok" }, at + 5);
        router.release(failedAlike(a as string, "server-error", false), at + 10);
        router.release(failedAlike(b as string, "server-error", false), at + 10);
      }
      expect(state(router)).toEqual(["closed", "closed", "closed"]);
    });

    // Found by reviews of a wider lookback (c036883, c8f22a1): a proxy's 502 or 504 is not always an engine down.
    const fail = (router: GroupRouter, x: RouteDecision, y: RouteDecision, at: number) => {
      router.release(failedAlike(x.lease), at + 5);
      router.release(failedAlike(y.lease), at + 10);
    };

    it("opens neither of a pair for one client's poison retried at low traffic", () => {
      const router = routerFor(group({ strategy: "round-robin" }, 2), rng(37));
      // The client's last good requests, answered by each backend just before.
      for (const d of [pick(router.pick([], 0)), pick(router.pick([], 0))]) router.release({ lease: (d as RouteDecision).lease, outcome: "ok" }, 800);
      // Then a request every engine's proxy fails in milliseconds, sent five times a second apart (an app's retry loop).
      for (let at = 1000; at <= 5000; at += 1000) {
        const x = pick(router.pick([], at)) as RouteDecision;
        fail(router, x, pick(router.pick([], at, [x.backendId])) as RouteDecision, at);
      }
      expect(router.snapshot().map((b) => b.breaker.state)).toEqual(["closed", "closed"]);
    });

    it("charges none of a group through a 2 s outage of the proxy every backend shares", () => {
      const router = routerFor(group({ strategy: "round-robin" }, 3), rng(37));
      let at = 0;
      for (; at < 10_000; at += 200) router.release({ lease: (pick(router.pick([], at)) as RouteDecision).lease, outcome: "ok" }, at + 150);
      for (; at < 12_000; at += 200) {
        const x = pick(router.pick([], at)) as RouteDecision;
        fail(router, x, pick(router.pick([], at, [x.backendId])) as RouteDecision, at);
      }
      expect(state(router)).toEqual(["closed", "closed", "closed"]);
    });

    it("opens no healthy backend under a flood of requests its proxy fails in milliseconds, beside 40 req/s of 1 s generations", () => {
      const router = routerFor(group({}, 3), rng(41));
      const ends: { at: number; lease: string }[] = [];
      let refused = 0;
      for (let at = 0; at < 30_000; at++) {
        for (const e of ends.filter((e) => e.at <= at)) router.release({ lease: e.lease, outcome: "ok" }, e.at);
        ends.splice(0, ends.length, ...ends.filter((e) => e.at > at));
        if (at % 25 === 0) {
          const d = pick(router.pick([], at));
          if (d) ends.push({ at: at + 1000 + ((at * 7919) % 40), lease: d.lease });
          else refused++;
        }
        if (at % 50 === 17) {
          const x = pick(router.pick([], at)) as RouteDecision;
          fail(router, x, pick(router.pick([], at, [x.backendId])) as RouteDecision, at - 2);
        }
      }
      expect({ refused, opened: router.snapshot().map((b) => b.breaker.opened) }).toEqual({ refused: 0, opened: [0, 0, 0] });
    });

    /** A routing object that (re)started at `startedAt`: what it knew of its backends' serving is gone. */
    const restartedAt = (g: ResolvedGroup, startedAt: number, random = rng(37)) => {
      const router = new GroupRouter(g.name, random);
      router.install(g, startedAt);
      return Object.assign(router, { at: (now: number, exclude: string[] = []) => pick(router.route(g.version, [], exclude, now)) });
    };

    it("opens no backend for one client's poison retried at low traffic just after its object restarted", () => {
      const router = restartedAt(group({ strategy: "round-robin" }, 2), 600_000);
      const ok = router.at(600_500) as RouteDecision;
      router.release({ lease: ok.lease, outcome: "ok" }, 601_000);
      for (let at = 602_000; at <= 606_000; at += 1000) {
        const x = router.at(at) as RouteDecision;
        fail(router, x, router.at(at, [x.backendId]) as RouteDecision, at);
      }
      expect(router.snapshot().map((b) => b.breaker.state)).toEqual(["closed", "closed"]);
    });

    it("opens no backend through a 2 s outage of the shared proxy 2 s after its object restarted, at 10 req/s of 1.5–6.5 s generations", () => {
      const router = restartedAt(group({}, 3), 600_000);
      const ends: { at: number; lease: string }[] = [];
      for (let at = 600_000; at < 612_000; at += 100) {
        for (const e of ends.filter((e) => e.at <= at)) router.release({ lease: e.lease, outcome: "ok" }, e.at);
        ends.splice(0, ends.length, ...ends.filter((e) => e.at > at));
        const x = router.at(at);
        if (!x) continue;
        if (at < 602_000 || at >= 604_000) ends.push({ at: at + 1500 + ((at * 7919) % 5000), lease: x.lease });
        else fail(router, x, router.at(at, [x.backendId]) as RouteDecision, at);
      }
      expect(state(router)).toEqual(["closed", "closed", "closed"]);
    });

    it("opens no healthy backend under a flood of requests its proxy fails in milliseconds, beside 30 s non-streamed generations", () => {
      const router = restartedAt(group({}, 3), 0, rng(41));
      const ends: { at: number; lease: string }[] = [];
      let refused = 0;
      for (let at = 0; at < 120_000; at += 10) {
        for (const e of ends.filter((e) => e.at <= at)) router.release({ lease: e.lease, outcome: "ok" }, e.at);
        ends.splice(0, ends.length, ...ends.filter((e) => e.at > at));
        if (at % 3000 === 0) {
          const d = router.at(at);
          if (d) ends.push({ at: at + 30_000 + ((at * 7919) % 4000), lease: d.lease });
          else refused++;
        }
        if (at >= 40_000 && at % 500 === 0) {
          const x = router.at(at) as RouteDecision;
          fail(router, x, router.at(at, [x.backendId]) as RouteDecision, at);
        }
      }
      expect({ refused, opened: router.snapshot().map((b) => b.breaker.opened) }).toEqual({ refused: 0, opened: [0, 0, 0] });
    });

    it("judges no 404 for the endpoint, no proxy's refusal, no 4xx, and no first token not come in time", () => {
      const router = proxiedRouter(1);
      const [a, b, c] = each(router, 0);
      router.release({ lease: c as string, outcome: "ok" }, 5);
      router.release(failedAlike(a as string, "not-served"), 10);
      router.release(failedAlike(b as string, "credentials"), 10);
      const [a2, b2, c2] = each(router, 1000);
      router.release({ lease: c2 as string, outcome: "ok" }, 1005);
      router.release({ lease: a2 as string, outcome: "rejected" }, 1010);
      router.release({ lease: b2 as string, outcome: "rejected", failure: "timeout", timedOut: true }, 1010);
      expect(state(router)).toEqual(["closed", "closed", "closed"]);
    });
  });

  it("with every backend at the valve, still places by cache and queue up to the hard cap, then refuses", () => {
    const router = routerFor(group({ saturation: 1, hotThreshold: 0 }, 2, { maxInFlight: 2 }), rng());
    const first = [chain(1, 5), chain(2, 5)].map((c) => pick(router.pick(c, 0))?.backendId);
    expect(new Set(first).size).toBe(2);
    // Both at the valve: each prompt goes back to the backend that has it computed.
    const again = [chain(1, 5), chain(2, 5)].map((c) => pick(router.pick(c, 100)));
    expect(again.map((d) => d?.backendId)).toEqual(first);
    expect(again.map((d) => d?.reason)).toEqual(["prefix-hit", "prefix-hit"]);
    expect(pick(router.pick(chain(1, 5), 100))).toBeNull();
  });

  it("sends a request with no prompt (embeddings, rerank, score) to the least-loaded backend, whatever prompt work is queued there", () => {
    const router = routerFor(group({ hotThreshold: 0 }, 2), rng());
    const long = pick(router.pick(chain(1, 1000), 0));
    // Two short prompts go where no long prefill waits, so the other backend has more in flight.
    const short = [pick(router.pick(chain(2, 1), 0)), pick(router.pick(chain(3, 1), 0))];
    expect(short.map((d) => d?.backendId)).toEqual([short[0]?.backendId, short[0]?.backendId]);
    expect(short[0]?.backendId).not.toBe(long?.backendId);
    const none = pick(router.pick([], 0));
    expect(none).toMatchObject({ backendId: long?.backendId, reason: "least-loaded", matched: 0, total: 0 });
  });

  it.each<Strategy>(["round-robin", "random", "least-loaded"])("%s ignores prefixes and labels its choice", (strategy) => {
    const router = routerFor(group({ strategy }), rng());
    const d = pick(router.pick(chain(1, 5), 0));
    expect(d?.reason).toBe(strategy);
    expect(d?.matched).toBe(0);
  });

  it("round-robin cycles through backends", () => {
    const router = routerFor(group({ strategy: "round-robin" }), rng());
    expect([0, 1, 2, 3, 4].map(() => pick(router.pick([], 0))?.backendId)).toEqual(["b0", "b1", "b2", "b3", "b0"]);
  });

  it("releases a lease once, whatever the outcome, and ignores unknown leases", () => {
    const router = routerFor(group(), rng());
    const a = pick(router.pick(chain(1, 5), 0));
    const b = pick(router.pick(chain(2, 5), 0));
    router.release({ lease: a?.lease ?? "", outcome: "upstream-error" }, 0);
    router.release({ lease: a?.lease ?? "", outcome: "ok" }, 0);
    router.release({ lease: "nope.1", outcome: "ok" }, 0);
    router.release({ lease: b?.lease ?? "", outcome: "client-abort", ttftMs: 12 }, 0);
    const snap = router.snapshot();
    expect(snap.reduce((n, s) => n + s.inFlight, 0)).toBe(0);
    expect(snap.reduce((n, s) => n + s.failed, 0)).toBe(1);
    expect(snap.reduce((n, s) => n + s.aborted, 0)).toBe(1);
    expect(router.leaseCount).toBe(0);
  });

  it("reclaims expired leases, and a late release of one changes nothing", () => {
    const router = routerFor(group({ leaseTtlMs: 1000 }), rng());
    const a = pick(router.pick(chain(1, 5), 0));
    pick(router.pick(chain(2, 5), 500));
    expect(router.nextExpiry).toBe(1000);
    expect(router.expire(999)).toBe(0);
    expect(router.expire(1000)).toBe(1);
    router.release({ lease: a?.lease ?? "", outcome: "ok" }, 0);
    expect(router.snapshot().reduce((n, s) => n + s.inFlight, 0)).toBe(1);
    pick(router.pick([], 1600));
    expect(router.snapshot().reduce((n, s) => n + s.expired, 0)).toBe(2);
  });
});

describe("GroupRouter: deployment weights", () => {
  /** Two backends, b0 of weight 1 and b1 of weight 3, under `strategy`. */
  function weighted(strategy: Strategy, over: Record<string, unknown> = {}): ResolvedGroup {
    const deployments = [1, 3].map((weight, i) => ({ id: `b${i}`, baseUrl: `http://127.0.0.1:${9001 + i}`, model: "m", weight }));
    const r = parseConfig({ modelGroups: [{ name: "g", strategy, deployments, ...over }] });
    if (!r.ok) throw new Error(r.error);
    return r.config.groups[0] as ResolvedGroup;
  }

  /** Where `n` requests held at once land: the in-flight counts per backend. */
  function heldAt(strategy: Strategy, n: number, chainOf: (i: number) => number[], over: Record<string, unknown> = {}): Record<string, number> {
    const router = routerFor(weighted(strategy, over), rng(7));
    const counts: Record<string, number> = { b0: 0, b1: 0 };
    for (let i = 0; i < n; i++) {
      const d = pick(router.pick(chainOf(i), 0));
      if (!d) throw new Error("refused");
      counts[d.backendId] = (counts[d.backendId] ?? 0) + 1;
    }
    return counts;
  }

  it("least-loaded fills backends in proportion to their weights", () => {
    expect(heldAt("least-loaded", 40, () => [])).toEqual({ b0: 10, b1: 30 });
  });

  it("prefix-aware balances new prompts by queued prompt work per unit of weight, and its valve scales with the weight", () => {
    // Weights 1 and 3: the weight-3 backend takes about three quarters of 40 new prompts (30), the other is not starved.
    const counts = heldAt("prefix-aware", 40, (i) => chain(i + 1, 4), { saturation: 100 });
    expect(Math.abs((counts.b1 as number) - 30)).toBeLessThanOrEqual(3);
    // One prompt, a saturation of 4: below the valve the weight-3 backend holds 12 of it, the other 4.
    expect(heldAt("prefix-aware", 16, () => chain(9, 8), { saturation: 4, hotThreshold: 0 })).toEqual({ b0: 4, b1: 12 });
  });

  it("random picks in proportion to the weights", () => {
    const router = routerFor(weighted("random"), rng(11));
    let b1 = 0;
    for (let i = 0; i < 4000; i++) {
      const d = pick(router.pick([], i));
      if (!d) throw new Error("refused");
      if (d.backendId === "b1") b1++;
      router.release({ lease: d.lease, outcome: "ok" }, i);
    }
    expect(b1 / 4000).toBeGreaterThan(0.72);
    expect(b1 / 4000).toBeLessThan(0.78);
  });
});
