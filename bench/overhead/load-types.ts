/** What a load generator is given and what it brings back, streaming or not. */

export interface RequestSpec {
  /** Full URL of the completions endpoint. */
  url: string;
  /** Extra request headers (auth, peer routing headers). */
  headers: Record<string, string>;
  /** JSON bodies, sent in turn. */
  bodies: string[];
}

export interface LoadResult {
  completed: number;
  errors: number;
  elapsedMs: number;
  /** Whole-response time of each successful request. */
  latenciesMs: number[];
  /** Time to the first content byte; streams only. */
  ttftMs: number[];
  /** x-kvgate-overhead-ms of each response that had it. */
  overheadMs: number[];
  /** A few error descriptions, to say what went wrong without flooding the report. */
  errorSamples: string[];
}
