import { describe, expect, it } from "vitest";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { Backend } from "../../src/routing/backend.ts";
import type { PickRequest } from "../../src/routing/policy.ts";
import { createSignals } from "../../src/routing/signals/index.ts";
import { POLICIES, STRATEGY_NAMES } from "../../src/routing/strategies/index.ts";

/** The policy seam: strategies are pure picks over candidates and signals; the config's names come from their registry. */

function group(over: Record<string, unknown> = {}, n = 4): ResolvedGroup {
  const deployments = Array.from({ length: n }, (_, i) => ({ id: `b${i}`, baseUrl: `http://127.0.0.1:${9001 + i}`, model: "m" }));
  const r = parseConfig({ modelGroups: [{ name: "g", deployments, ...over }] });
  if (!r.ok) throw new Error(r.error);
  return r.config.groups[0] as ResolvedGroup;
}

function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

const chain = (prefix: number, n: number) => Array.from({ length: n }, (_, i) => prefix * 1_000_000 + i);

/** Backends in the state a route call leaves them in after admit: caps and weights set, availability judged. */
function backends(g: ResolvedGroup, state: { inFlight: number; available?: boolean; debt?: number; learned?: number[][] }[]): Backend[] {
  return g.deployments.map((d, i) => {
    const b = new Backend(d, g);
    const s = state[i] ?? { inFlight: 0 };
    b.maxInFlight = d.maxInFlight;
    b.inFlight = s.inFlight;
    b.available = s.available ?? true;
    b.prefillDebt = s.debt ?? 0;
    for (const c of s.learned ?? []) b.prefixes.learn(c);
    return b;
  });
}

describe("the strategy registry", () => {
  it("is where the config's strategy names come from, in its order", () => {
    expect(STRATEGY_NAMES).toEqual(Object.keys(POLICIES));
    for (const strategy of STRATEGY_NAMES) expect(group({ strategy }).strategy).toBe(strategy);
    const r = parseConfig({ modelGroups: [{ name: "g", strategy: "fastest", deployments: [{ baseUrl: "http://127.0.0.1:9001", model: "m" }] }] });
    expect(r.ok ? "" : r.error).toContain(`must be one of ${STRATEGY_NAMES.map((s) => `"${s}"`).join(", ")}`);
  });
});

describe("a strategy's pick", () => {
  const g = group({ saturation: 3, balanceAbs: 1, balanceRel: 1.2 });
  const system = chain(1, 40);
  const states = [
    // Idle, one backend warm with the system prompt.
    [{ inFlight: 0, learned: [system] }, { inFlight: 0 }, { inFlight: 0 }, { inFlight: 0 }],
    // The warm one busy and in debt, another at the valve, one unavailable.
    [{ inFlight: 2, debt: 80, learned: [[...system, ...chain(2, 3)]] }, { inFlight: 3, learned: [system] }, { inFlight: 0, available: false, learned: [system] }, { inFlight: 1 }],
    // All at the valve.
    [{ inFlight: 3 }, { inFlight: 4, learned: [system] }, { inFlight: 3 }, { inFlight: 5 }],
    // None usable: every backend unavailable or at its hard cap.
    [{ inFlight: 256 }, { inFlight: 0, available: false }, { inFlight: 256 }, { inFlight: 0, available: false }],
  ];

  it.each(STRATEGY_NAMES)("%s: the same candidates, signals and draws give the same choice, and it changes none of them", (name) => {
    const policy = POLICIES[name];
    for (const [k, state] of states.entries()) {
      const candidates = backends(g, state);
      const signals = createSignals();
      const prompt = [...system, ...chain(9, 2)];
      const request: PickRequest = { chain: prompt, blocks: prompt.length, cursor: k, settings: g, signals };
      for (const s of policy.reads) signals[s].produce(candidates, request.chain, g, 0);
      const before = JSON.stringify({ candidates: candidates.map((b) => [b.inFlight, b.available, b.prefillDebt, b.prefixes.values()]), signals, request });
      const first = policy.pick(candidates, request, rng(k + 1));
      const again = policy.pick(candidates, request, rng(k + 1));
      expect(again).toEqual(first);
      expect(JSON.stringify({ candidates: candidates.map((b) => [b.inFlight, b.available, b.prefillDebt, b.prefixes.values()]), signals, request })).toBe(before);
      if (k === states.length - 1) expect(first).toBeNull();
      else expect(first?.index).toBeGreaterThanOrEqual(0);
    }
  });
});

describe("the prefix-match signal", () => {
  it("measures each usable backend's match, the longest, and whether it ends at a branch point", () => {
    const g = group({ hotThreshold: 0 });
    const signals = createSignals();
    const convo = [...chain(1, 10), ...chain(2, 5)];
    const bs = backends(g, [{ inFlight: 0, learned: [convo] }, { inFlight: 0, learned: [chain(1, 10), [...chain(1, 10), ...chain(3, 2)]] }, { inFlight: 0, available: false, learned: [convo] }, { inFlight: 0 }]);
    signals.prefix.produce(bs, [...convo, ...chain(4, 1)], g, 0);
    expect(signals.prefix.matched.slice(0, 4)).toEqual([15, 10, 0, 0]);
    expect(signals.prefix.best).toBe(15);
    // The conversation's own history ends there: owned, not shared.
    expect(signals.prefix.shared).toBe(false);
    // A new conversation on the same first 10 blocks: on b0, the first to hold them, a chain went on past them.
    signals.prefix.produce(bs, [...chain(1, 10), ...chain(5, 3)], g, 0);
    expect(signals.prefix.matched.slice(0, 4)).toEqual([10, 10, 0, 0]);
    expect(signals.prefix.shared).toBe(true);
  });

  it("counts each request whose best match ends at a prefix, which is hot from the threshold on", () => {
    const g = group({ hotThreshold: 3, hotHalfLifeMs: 1000 });
    const signals = createSignals();
    const own = chain(1, 10);
    const bs = backends(g, [{ inFlight: 0, learned: [own] }]);
    const shared = [0, 0, 0].map(() => (signals.prefix.produce(bs, own, g, 0), signals.prefix.shared));
    expect(shared).toEqual([false, false, true]);
    // Five half-lives later the count has decayed below the threshold.
    signals.prefix.produce(bs, own, g, 5000);
    expect(signals.prefix.shared).toBe(false);
    // No match, no count: an unrelated prompt leaves it as it was.
    signals.prefix.produce(bs, chain(7, 3), g, 5000);
    expect([signals.prefix.best, signals.prefix.shared]).toEqual([0, false]);
  });
});
