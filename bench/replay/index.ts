export { replay } from "./replay.ts";
export { SseScanner, type SseHandler } from "./sse-scanner.ts";
export { backendShare, kvHit, summarize, ttftPercentiles, ttftRuleOf, TTFT_RULE, UNKNOWN_BACKEND, type ReplaySummary } from "./stats.ts";
export type { ReplayOptions, ReplayResult, RequestResult } from "./types.ts";
export { replayOpenLoop, type OpenLoopOptions, type OpenLoopRequest, type OpenLoopResult, type Outcome } from "./open-loop.ts";
export { DEFAULT_SLO_TTFT_MS, openLoopKvRule, summarizeOpenLoop, type OpenLoopSummary, type OpenLoopSummaryOptions } from "./open-loop-stats.ts";
