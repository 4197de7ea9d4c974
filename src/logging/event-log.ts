import { LOG_LEVELS, type LogLevel } from "../config/schema.ts";

/** A field of a log line: scalars and lists of names only, never a key, a prompt or a header value. */
export type LogValue = string | number | boolean | null | readonly string[];

/** Whether a line at `level` is written when the config asks for `min` and above. */
export function atLeast(level: LogLevel, min: LogLevel): boolean {
  return LOG_LEVELS.indexOf(level) >= LOG_LEVELS.indexOf(min);
}

/**
 * Writes one event line: something that happened to the fleet rather than a request's answer
 * (`failover`, `breaker`, `registry`). Events are rare, so each is written as it happens. The
 * console is what Workers Logs, `wrangler tail` and Logpush read.
 */
export function logEvent(event: string, level: LogLevel, fields: Record<string, LogValue>): void {
  console.log(JSON.stringify({ type: "event", time: new Date().toISOString(), level, event, ...fields }));
}
