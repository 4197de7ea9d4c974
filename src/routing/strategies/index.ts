import type { Policy } from "../policy.ts";
import { leastLoaded } from "./least-loaded.ts";
import { prefixAware } from "./prefix-aware.ts";
import { random } from "./random.ts";
import { roundRobin } from "./round-robin.ts";

/**
 * Every routing strategy, by the name a group's `strategy` gives it: the config accepts exactly
 * these names, in this order. Adding a strategy: its file beside this one, and a line here.
 */
export const POLICIES = {
  "round-robin": roundRobin,
  random,
  "least-loaded": leastLoaded,
  "prefix-aware": prefixAware,
} satisfies Record<string, Policy>;

export type StrategyName = keyof typeof POLICIES;
export const STRATEGY_NAMES = Object.keys(POLICIES) as StrategyName[];
