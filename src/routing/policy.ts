import type { GroupSettings } from "../config/schema.ts";
import type { Backend } from "./backend.ts";
import type { SignalName, Signals } from "./signals/index.ts";

/**
 * The policy seam: what a routing strategy is. GroupRouter runs every request through
 * admit → signals → pick → commit:
 * - admit: the router marks which backends may take the request (`available`: admitted by the
 *   newest version, not already failed on by this request, breaker not open, not resting after a
 *   429 while another can take it);
 * - signals: it measures the request against every backend, once, for the signals the strategy
 *   reads (src/routing/signals/), and only for those;
 * - pick: the strategy chooses one candidate from the candidates and those signals, a pure
 *   function of them and `rng`;
 * - commit: the router takes the chosen backend's in-flight slot and adds to its prefill debt,
 *   and, for a strategy that reads prefix matches, teaches that backend's prefix set the chain.
 * A strategy is one file in src/routing/strategies/ and a line in its registry (index.ts), which
 * is where the config's strategy names come from.
 */
export interface Policy {
  /** The signals it reads: the router produces them before the pick, and only for a strategy that names them. */
  readonly reads: readonly SignalName[];
  /**
   * The candidate to take the request, or null when none can (all unavailable or at their hard
   * in-flight cap). Pure: it reads its arguments, changes none of them, and draws on `rng` alone
   * for chance (ties, random picks).
   */
  pick(candidates: readonly Candidate[], request: PickRequest, rng: Rng): Choice | null;
}

/**
 * A measurement of one request against every backend of its config version, made once before the
 * pick and read by any strategy that names it. It may keep what it needs across requests (the hot
 * prefixes' counts); what it measured stays in its fields until the next request's.
 */
export interface Signal {
  produce(backends: readonly Backend[], chain: ArrayLike<number>, settings: GroupSettings, now: number): void;
}

/** What a strategy sees of one backend (src/routing/backend.ts keeps the rest). */
export interface Candidate {
  readonly inFlight: number;
  readonly maxInFlight: number;
  /** Prompt blocks routed here and not yet prefilled, by the backend's drain rate. */
  readonly prefillDebt: number;
  /** False while its breaker is open, when the newest version does not admit it, when this request already failed on it, or while it rests after a 429 and another can take the request. */
  readonly available: boolean;
  /** Its share of the load relative to the others (the deployment's `weight`, default 1). */
  readonly weight: number;
  /** How full its KV cache is taken to be, 0–1: the blocks its prefix set holds over what the set may hold. */
  readonly cacheFill: number;
}

/** One request, as its strategy is asked about it. */
export interface PickRequest {
  /** The prompt's block hashes; empty for a request with no prompt (embeddings, rerank, score). */
  readonly chain: ArrayLike<number>;
  /** The prompt's size in blocks: the chain's length, or more when the chain was cut at maxPrefixBlocks. */
  readonly blocks: number;
  /** The candidate after the one this config version's previous request went to. */
  readonly cursor: number;
  /** The group's settings in the caller's config version. */
  readonly settings: GroupSettings;
  /** The signals measured for this request: those the strategy reads are current, no others. */
  readonly signals: Signals;
}

export type RouteReason = "prefix-hit" | "hot-spread" | "least-loaded" | "round-robin" | "random" | "saturated-spill" | "load-balanced";

export interface Choice {
  /** The chosen candidate's position. */
  index: number;
  reason: RouteReason;
  /** Leading blocks of the chain the chosen backend is taken to hold. */
  matched: number;
}

export type Rng = () => number;

/** In-flight requests per unit of weight: a weight-2 server at 4 is as loaded as a weight-1 one at 2. */
export function load(c: Candidate): number {
  return c.inFlight / c.weight;
}

/** May take a request: available and below its hard in-flight cap. */
export function usable(c: Candidate): boolean {
  return c.available && c.inFlight < c.maxInFlight;
}
