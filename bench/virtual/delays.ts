/**
 * What virtual time stands in for the fleet's path with (VirtualReplayOptions): each request's
 * body read before it is routed, a hop before routing and a hop after, per traffic shape. Each was
 * fitted to bench:routing's fleet runs (fleet-fit.ts; README, Benchmarks → Routing, *In virtual time*).
 */
export interface Delays {
  /** ms per MB of body before routing (VirtualReplayOptions.msPerMb). */
  msPerMb: number;
  /** Bound of the hop before routing (VirtualReplayOptions.preRouteHopMs). */
  preRouteHopMs: number;
  /** Bound of the hop after it (VirtualReplayOptions.hopMs). */
  hopMs: number;
}

/**
 * 50 ms per MB puts least-loaded's and round-robin's Mooncake TTFT p50 within 6% of the fleet's
 * (slices 1–3; 1.34 × and 1.25 × without it) and, with the closed-loop hops, the 45 points' p95s
 * nearer theirs. Hops on both sides of the decision: drawn only after it, a hop reorders a burst
 * the router has already queued (VirtualReplayOptions.preRouteHopMs).
 */
const MS_PER_MB = 50;

/**
 * An open-loop trace's requests go out on their own clock: 0–10 ms on each side stands for the
 * chaos of the fleet's. On Mooncake slices 1–3 (16 draws) every router's TTFT p50 lands within 6%
 * of the fleet's (prefix-aware 1.06 × the mean of its fleet runs at 41f4bb0 and 61bc37b,
 * least-loaded 1.00 ×, round-robin 1.02 ×), where 0–20 ms after routing alone put prefix-aware's
 * at 1.23 ×.
 */
export const OPEN_LOOP_DELAYS: Delays = { msPerMb: MS_PER_MB, preRouteHopMs: 10, hopMs: 10 };

/**
 * A closed-loop point's TTFTs are tens of ms, and 0–10 ms in all is the bound whose TTFT p50s land
 * nearest the fleet's: over the 45 points, 0–2 ms after routing put every router's p50 3–9% under
 * the fleet's at the median point and least-loaded's 14–16% off it on average (a lockstep the
 * fleet does not have); 0–10 ms within 3.5%, and 4–7%; 0–15 and 0–20 ms overshoot. Split 0–5 on
 * each side, the six regime-and-router p50 fits stay within 3% at the median point, and
 * prefix-aware's mean miss falls to 7.2% and 3.0% (roomy, pressured) from 8.8% and 3.8%.
 */
export const CLOSED_LOOP_DELAYS: Delays = { msPerMb: MS_PER_MB, preRouteHopMs: 5, hopMs: 5 };
