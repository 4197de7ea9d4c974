import { PrefixMatch } from "./prefix-match.ts";

/**
 * Every signal a strategy may read, by the name its `reads` gives: one of each per router,
 * produced before the pick for a strategy that reads it, and only then. Adding a signal: its file
 * beside this one (a class implementing Signal, src/routing/policy.ts), and a line here.
 */
export function createSignals() {
  return {
    prefix: new PrefixMatch(),
  };
}

export type Signals = ReturnType<typeof createSignals>;
export type SignalName = keyof Signals;
