import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { mulberry32 } from "../traces/prng.ts";

export const CONVERSATIONS_PER_BACKEND = 4;
/** Turns a conversation lasts before a new one (a new history under the shared prefix) takes its place. */
export const TURNS = 8;
export const IN_FLIGHT_PER_BACKEND = 8;

/** A prefix-aware group of `backends` at the default settings, over `shards` objects. */
export function group(backends: number, shards = 1): ResolvedGroup {
  const deployments = Array.from({ length: backends }, (_, i) => ({ id: `gpu-${i}`, baseUrl: `http://10.0.${i >> 8}.${i & 255}:8000`, model: "m" }));
  const r = parseConfig({ modelGroups: [{ name: "g", strategy: "prefix-aware", shards, deployments }] });
  if (!r.ok) throw new Error(r.error);
  return r.config.groups[0] as ResolvedGroup;
}

/**
 * The conversations' next prompts: each call picks one at random and returns its chain for the
 * next turn. Seeded by the point, so two of them give the same prompts in the same order.
 */
export function conversations(backends: number, chainBlocks: number): () => number[] {
  const rand = mulberry32(backends * 10_007 + chainBlocks).next;
  const id = () => Math.floor(rand() * 2 ** 52);
  const shared = Array.from({ length: Math.max(1, chainBlocks >> 2) }, id);
  // Each turn adds `step` blocks; a conversation's first turn is long enough that its last is chainBlocks.
  const step = Math.max(1, Math.round(chainBlocks / 100));
  const first = Math.max(shared.length, chainBlocks - (TURNS - 1) * step);
  const fresh = (): { chain: number[]; turn: number } => ({ chain: [...shared, ...Array.from({ length: first - shared.length }, id)], turn: 0 });
  // Conversations start at staggered turns, so their restarts spread over the run.
  const all = Array.from({ length: backends * CONVERSATIONS_PER_BACKEND }, (_, i) => {
    const c = fresh();
    for (let t = 0; t < i % TURNS; t++) c.chain.push(...Array.from({ length: step }, id));
    c.turn = i % TURNS;
    return c;
  });
  return () => {
    const i = Math.floor(rand() * all.length);
    let c = all[i] as { chain: number[]; turn: number };
    if (c.turn === TURNS) c = all[i] = fresh();
    else if (c.turn > 0) for (let k = 0; k < step; k++) c.chain.push(id());
    c.turn++;
    return c.chain;
  };
}

