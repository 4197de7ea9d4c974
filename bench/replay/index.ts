export { replay } from "./replay.ts";
export { SseScanner, type SseHandler } from "./sse-scanner.ts";
export { backendShare, kvHit, percentile, summarize, UNKNOWN_BACKEND, type Percentiles, type ReplaySummary } from "./stats.ts";
export type { ReplayOptions, ReplayResult, RequestResult } from "./types.ts";
