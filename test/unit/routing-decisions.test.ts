import { createHash } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { resolveGroup } from "../../src/config/resolve.ts";
import { GroupRouter } from "../../src/routing/group-router.ts";
import type { LeaseOutcome } from "../../src/routing/protocol.ts";

/**
 * Characterization: a long seeded run of route, release, failover, renewal, probe and expiry
 * calls through GroupRouter, for every strategy and a few settings, recorded decision by decision
 * (backend, reason, matched blocks, or the refusal). The recording was made on the code before
 * the strategies were split behind the policy seam; any change of routing behaviour shows here as
 * the first decision that differs. A deliberate change of behaviour re-records it:
 * `KVGATE_RECORD_DECISIONS=1 npx vitest run --project unit test/unit/routing-decisions.test.ts`.
 */

const FIXTURE = new URL("./fixtures/routing-decisions.txt", import.meta.url);
const STEPS = 1000;
/** More runs of each scenario on other seeds, recorded as a digest of their decisions: rarer paths, no bulk. */
const MORE_SEEDS = 12;

/** Seeded, for the workload and for the router's own tie-breaks and probe jitter. */
function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32);
}

/** A prefix-closed chain: each block's hash mixes the one before it, as the Worker's fingerprint does. */
function extend(prev: number, block: number): number {
  const lo = Math.imul((prev >>> 0) ^ Math.imul(block, 0x9e3779b1), 0x85ebca6b) >>> 0;
  const hi = Math.imul((Math.floor(prev / 2 ** 32) ^ lo ^ block) >>> 0, 0xc2b2ae35) >>> 12;
  return hi * 2 ** 32 + lo;
}

interface Session {
  /** Block ids: a shared system prompt, maybe a shared document, then its own turns. */
  blocks: number[];
  turnsLeft: number;
  /** The chain of its last turn. */
  previous: number[];
}

function chainOf(blocks: readonly number[]): number[] {
  const out: number[] = [];
  let h = 0;
  for (const b of blocks) out.push((h = extend(h, b)));
  return out;
}

function group(over: Record<string, unknown>, deployments: Record<string, unknown>[]): ResolvedGroup {
  const r = parseConfig({ modelGroups: [{ name: "g", ...over, deployments: deployments.map((d, i) => ({ id: `b${i}`, baseUrl: `http://127.0.0.1:${9001 + i}`, model: "m", ...d })) }] });
  if (!r.ok) throw new Error(r.error);
  return r.config.groups[0] as ResolvedGroup;
}

const BREAKER = { consecutiveFailures: 3, openMs: 400, probeIntervalMs: 100, minRequests: 10, windowMs: 2000 };
const four = (d: Record<string, unknown> = {}) => [0, 1, 2, 3].map(() => ({ maxInFlight: 8, kvCapacityBlocks: 4096, ...d }));

interface Scenario {
  name: string;
  seed: number;
  /** The versions the router is given, in install order; calls go to them in turn. */
  versions: ResolvedGroup[];
}

function scenarios(): Scenario[] {
  const base = (strategy: string, over: Record<string, unknown> = {}) => group({ strategy, saturation: 4, breaker: BREAKER, leaseTtlMs: 3000, ...over }, four());
  const weighted = (strategy: string, over: Record<string, unknown> = {}) =>
    group({ strategy, saturation: 6, balanceAbs: 1, balanceRel: 1.2, breaker: BREAKER, leaseTtlMs: 3000, ...over }, [
      { weight: 1, maxInFlight: 6, kvCapacityBlocks: 300, prefillTokensPerSec: 4000 },
      { weight: 3, maxInFlight: 18, kvCapacityBlocks: 900, prefillTokensPerSec: 20_000 },
      { weight: 0.5, maxInFlight: 4, kvCapacityBlocks: 150, prefillTokensPerSec: 2000 },
      { weight: 2, maxInFlight: 12, kvCapacityBlocks: 600 },
    ]);
  const out: Scenario[] = [];
  for (const strategy of ["prefix-aware", "least-loaded", "round-robin", "random"]) {
    out.push({ name: `${strategy} base`, seed: 11, versions: [base(strategy)] });
    out.push({ name: `${strategy} weighted`, seed: 23, versions: [weighted(strategy)] });
  }
  out.push({ name: "prefix-aware cold (no hot prefixes, a small prefix budget)", seed: 37, versions: [base("prefix-aware", { hotThreshold: 0, prefixBudgetBlocks: 400, saturation: 3, balanceAbs: 0, balanceRel: 1 })] });
  out.push({ name: "prefix-aware hot (a low threshold, a short half-life)", seed: 41, versions: [base("prefix-aware", { hotThreshold: 1.5, hotHalfLifeMs: 300, saturation: 8, balanceAbs: 8, balanceRel: 3 })] });
  out.push({ name: "prefix-aware warm (a high threshold, a long half-life)", seed: 43, versions: [base("prefix-aware", { hotThreshold: 4, hotHalfLifeMs: 60_000, saturation: 6, balanceAbs: 2 })] });
  // Versions of the group with different strategies share the servers, their prefix sets and the hot prefixes.
  const mixed = base("prefix-aware");
  const ll = group({ strategy: "least-loaded", saturation: 4, breaker: BREAKER, leaseTtlMs: 3000 }, [...four(), { maxInFlight: 8 }]);
  const rr = resolveGroup({ ...mixed, strategy: "round-robin" }, [...mixed.deployments.slice(1), { ...(mixed.deployments[0] as ResolvedGroup["deployments"][number]), state: "draining" }], 1);
  out.push({ name: "versions: prefix-aware, least-loaded, then round-robin draining b0", seed: 53, versions: [mixed, ll, rr] });
  return out;
}

interface Held {
  lease: string;
  backend: string;
  chain: number[];
  version: string;
}

/** Runs one scenario; returns a line per decision, then a line of the final state. */
function run(s: Scenario, seed = s.seed): string[] {
  const w = lcg(seed);
  const router = new GroupRouter("g", lcg(seed * 7919));
  const lines: string[] = [];
  let now = 1000;
  let installed = 0;
  const install = () => router.install(s.versions[installed++] as ResolvedGroup, now);
  install();
  const systems = [40, 64, 20].map((n, k) => Array.from({ length: n }, (_, i) => 1000 * (k + 1) + i));
  const docs = [30, 100, 55, 70, 12].map((n, k) => Array.from({ length: n }, (_, i) => 100_000 + 1000 * k + i));
  let nextBlock = 1_000_000;
  const fresh = (n: number) => Array.from({ length: n }, () => nextBlock++);
  const newSession = (): Session => {
    const sys = systems[Math.floor(w() * systems.length)] as number[];
    const doc = w() < 0.4 ? (docs[Math.floor(w() * docs.length)] as number[]) : [];
    return { blocks: [...sys, ...doc, ...fresh(1 + Math.floor(w() * 6))], turnsLeft: 1 + Math.floor(w() * 8), previous: [] };
  };
  const sessions = Array.from({ length: 16 }, newSession);
  /** Where the session's shared part (its system prompt, then its document) ends. */
  const sharedLength = (x: Session) => {
    let n = 0;
    while (n < x.blocks.length && (x.blocks[n] as number) < 1_000_000) n++;
    return w() < 0.5 ? n : (systems.find((sys) => sys[0] === x.blocks[0]) as number[]).length;
  };
  const held: Held[] = [];
  let target = 10;

  const route = (version: string, chain: number[], exclude: string[], failover: boolean) => {
    const d = router.route(version, chain, exclude, now, undefined, failover);
    if ("refused" in d) {
      lines.push(`! ${d.refused}`);
      return;
    }
    lines.push(`${d.backendId} ${d.reason} ${d.matched}/${d.total}`);
    held.push({ lease: d.lease, backend: d.backendId, chain, version });
  };

  const release = (h: Held, outcome: LeaseOutcome) => {
    router.release({ lease: h.lease, outcome, ...(outcome === "ok" || w() < 0.5 ? { ttftMs: Math.floor(w() * 400), durationMs: Math.floor(w() * 2000) } : {}) }, now);
  };

  for (let step = 0; step < STEPS; step++) {
    now += Math.floor(w() * w() * 60);
    if (w() < 0.01) now += 500 + Math.floor(w() * 4000);
    if (step % 150 === 0) target = [4, 10, 20, 36, 14, 6][(step / 150) % 6] as number;
    if (installed < s.versions.length && step === Math.floor((STEPS * installed) / s.versions.length)) install();
    const version = (s.versions[step % installed] as ResolvedGroup).version;

    // A request: a session's next turn; now and then a prompt-less call, or one that ends where
    // a shared prefix ends (a system prompt or a document alone).
    const si = Math.floor(w() * sessions.length);
    const session = sessions[si] as Session;
    const kind = w();
    const promptless = kind < 0.05;
    const shared = !promptless && kind < 0.12;
    // An answer regenerated: the session's previous turn again, which its next turn already extended.
    const again = !promptless && !shared && kind < 0.17 && session.previous.length > 0;
    const chain = promptless ? [] : shared ? chainOf(session.blocks.slice(0, sharedLength(session))) : again ? session.previous : chainOf(session.blocks);
    if (!promptless && !shared && !again) {
      session.previous = chain;
      session.blocks.push(...fresh(2 + Math.floor(w() * 5)));
      if (--session.turnsLeft <= 0) sessions[si] = newSession();
    }
    route(version, chain, [], false);
    // Now and then the same prompt comes several times at once (parallel samples of one prompt).
    if (w() < 0.04) for (let n = 1 + Math.floor(w() * 5); n > 0; n--) route(version, chain, [], false);

    // Releases, more of them the further above the target concurrency.
    while (held.length > 0 && w() < (held.length > target ? 0.75 : 0.3)) {
      const h = held.splice(Math.floor(w() * held.length), 1)[0] as Held;
      // b1 goes through a bad spell: most of what it serves fails, which opens its breaker.
      const bad = h.backend === "b1" && step >= 400 && step < 700;
      const r = w();
      const outcome: LeaseOutcome = bad && r < 0.8 ? "upstream-error" : r < 0.8 ? "ok" : r < 0.85 ? "upstream-error" : r < 0.9 ? "rejected" : r < 0.95 ? "client-abort" : "rate-limited";
      release(h, outcome);
      // A failed attempt is retried elsewhere, as the Worker does before the first byte.
      if (outcome === "upstream-error" && w() < 0.7) route(h.version, h.chain, [h.backend, ...(w() < 0.2 ? ["b2"] : [])], true);
    }
    // A request that already failed on every backend.
    if (w() < 0.01) route(version, chain, ["b0", "b1", "b2", "b3", "b4"], true);
    // A Worker killed mid-stream: its lease is never released, and expires.
    if (held.length > 0 && w() < 0.02) held.splice(Math.floor(w() * held.length), 1);
    // Renewals: of a live lease, now and then of one this object never saw (it restarted).
    if (held.length > 0 && w() < 0.05) {
      const h = held[Math.floor(w() * held.length)] as Held;
      router.renew({ lease: h.lease, version: h.version, backendId: h.backend }, now);
    }
    if (w() < 0.005) router.renew({ lease: `gone.${step}`, version, backendId: `b${Math.floor(w() * 4)}` }, now);
    // The object's alarm: health probes of open breakers, leases past their TTL.
    if (step % 20 === 0) {
      for (const p of router.dueProbes(now)) router.probed(p.key, w() < 0.5, now);
      const expired = router.expire(now);
      if (expired > 0) lines.push(`expired ${expired}`);
    }
    for (const c of router.takeBreakerChanges()) lines.push(`breaker ${c.backend} ${c.from}>${c.saved.state}`);
  }
  const state = router
    .snapshot()
    .map((b) => `${b.id}:${b.inFlight}/${b.prefixBlocks}/${b.prefillDebtBlocks}/${b.breaker.state}/${b.completed}/${b.failed}/${b.expired}`)
    .join(" ");
  lines.push(`state ${state}`);
  return lines;
}

const moreSeeds = (s: Scenario) => Array.from({ length: MORE_SEEDS }, (_, k) => s.seed + 1000 * (k + 1));
const digest = (lines: string[]) => createHash("sha256").update(lines.join("\n")).digest("hex").slice(0, 16);

/** A scenario's decisions on its own seed, then a digest line per further seed. */
function recorded(s: Scenario): string[] {
  return [...run(s), ...moreSeeds(s).map((seed) => `digest ${seed} ${digest(run(s, seed))}`)];
}

function record(): string {
  return scenarios()
    .map((s) => [`## ${s.name}`, ...recorded(s)].join("\n"))
    .join("\n\n")
    .concat("\n");
}

/** The recorded sections, by scenario name. */
function sections(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const part of text.split(/^## /m).slice(1)) {
    const [name, ...lines] = part.trimEnd().split("\n");
    out.set(name as string, lines);
  }
  return out;
}

describe("routing decisions, decision for decision", () => {
  if (process.env.KVGATE_RECORD_DECISIONS === "1") writeFileSync(FIXTURE, record());
  const expected = sections(readFileSync(FIXTURE, "utf8"));

  it("records every scenario", () => {
    expect([...expected.keys()]).toEqual(scenarios().map((s) => s.name));
  });

  it.each(scenarios().map((s) => [s.name, s] as const))("%s", (name, s) => {
    const want = expected.get(name) ?? [];
    const got = recorded(s);
    const at = got.findIndex((line, i) => line !== want[i]);
    // The first decision that differs, with the few before it: the rest follow from it. (A digest
    // line that differs names a seed: record its run in full on both sides to see where.)
    const around = (lines: string[]) => lines.slice(Math.max(0, at - 3), at + 1);
    expect(at < 0 && got.length === want.length ? null : { at, got: around(got), want: around(want) }).toBeNull();
  });
});
