import type { TokenUsage } from "../routing/protocol.ts";
import { usageOf } from "../stream/usage.ts";

/**
 * How far into a backend's message its type is looked for. An event names its type first, and
 * most of a session's messages are audio and text deltas (an audio delta's base64 runs to tens of
 * KiB): only the head of each is searched, and only a `response.done` is parsed.
 */
const TYPE_WITHIN = 256;

/**
 * The tokens a realtime session's backend reported: each `response.done` event carries its
 * response's usage (input, output, cached input tokens), summed over the session's life. Read for
 * a virtual key that counts tokens (its budget, token limit or usage records), and charged as it
 * comes (workers/gateway/realtime.ts), the rest with the session's end.
 */
export class RealtimeUsage {
  private sum: TokenUsage | null = null;

  /** One message from the backend (a text frame); when it reported usage, all reported so far (a copy). */
  take(message: string): TokenUsage | null {
    const head = message.length > TYPE_WITHIN ? message.slice(0, TYPE_WITHIN) : message;
    if (!head.includes('"response.done"')) return null;
    let event: { type?: unknown; response?: { usage?: unknown } | null };
    try {
      event = JSON.parse(message) as typeof event;
    } catch {
      return null;
    }
    const reported = event?.type === "response.done" ? event.response?.usage : null;
    const u = typeof reported === "object" && reported !== null ? usageOf(reported) : null;
    if (!u) return null;
    const s = (this.sum ??= { prompt: 0, completion: 0, cached: 0, cacheReported: false });
    // Bounded as a reported count is: a sum past 2^53 would stop being a whole number.
    s.prompt = Math.min(Number.MAX_SAFE_INTEGER, s.prompt + u.promptTokens);
    s.completion = Math.min(Number.MAX_SAFE_INTEGER, s.completion + u.completionTokens);
    s.cached = Math.min(s.prompt, s.cached + u.cachedTokens);
    return { ...s };
  }

  /**
   * What was reported, if any response was done. Its cached tokens price the prompt, but teach
   * routing nothing (`cacheReported` false): a session's prompt is never hashed, so there is no
   * prediction to set them against.
   */
  get total(): TokenUsage | undefined {
    // A copy: a release queued with it must not change with what the backend sends after.
    return this.sum ? { ...this.sum } : undefined;
  }
}
