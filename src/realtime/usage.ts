import type { TokenUsage } from "../routing/protocol.ts";
import { usageOf } from "../stream/usage.ts";
import { headOf } from "./event-type.ts";

/**
 * The tokens a realtime session's backend reported: each `response.done` event carries its
 * response's usage (input, output, cached input tokens), summed over the session's life. Read for
 * a virtual key that counts tokens (its budget, token limit or usage records), and charged as it
 * comes (workers/gateway/realtime.ts), the rest with the session's end.
 */
export class RealtimeUsage {
  private sum: TokenUsage | null = null;

  /** Output deltas since the last response.done: what a response left before its end made. */
  private unreported = 0;

  /**
   * One message from the backend (a text frame); when it reported usage, all reported so far (a
   * copy). Most of a session's messages are deltas: only each one's head is searched, and only a
   * `response.done` is parsed.
   */
  take(message: string): TokenUsage | null {
    const head = headOf(message);
    if (head.includes('"response.done"')) {
      const done = this.done(message);
      if (done) return done.reported;
    }
    if (OUTPUT_DELTA.test(head)) this.unreported++;
    return null;
  }

  /**
   * A response.done: its response is over, whatever it reported (its deltas are no longer one
   * left); its usage added to the sum, and all reported so far (null when it reported none). Null
   * for any other message.
   */
  private done(message: string): { reported: TokenUsage | null } | null {
    let event: { type?: unknown; response?: { usage?: unknown } | null };
    try {
      event = JSON.parse(message) as typeof event;
    } catch {
      return null;
    }
    if (event?.type !== "response.done") return null;
    this.unreported = 0;
    const reported = event.response?.usage;
    const u = typeof reported === "object" && reported !== null ? usageOf(reported) : null;
    if (!u) return { reported: null };
    const s = (this.sum ??= { prompt: 0, completion: 0, cached: 0, cacheReported: false });
    // Bounded as a reported count is: a sum past 2^53 would stop being a whole number.
    s.prompt = Math.min(Number.MAX_SAFE_INTEGER, s.prompt + u.promptTokens);
    s.completion = Math.min(Number.MAX_SAFE_INTEGER, s.completion + u.completionTokens);
    s.cached = Math.min(s.prompt, s.cached + u.cachedTokens);
    return { reported: { ...s } };
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

  /**
   * What a session its client left (or the gateway ended) is charged: what was reported, and an
   * output token for every delta of a response whose response.done never came — else a client
   * that reads each response and leaves before its end is charged nothing for any. A floor for
   * audio, whose deltas carry several tokens each; as the estimate of a stream a client left is
   * (src/tenants/estimate.ts), one token an event.
   */
  get totalIfLeft(): TokenUsage | undefined {
    if (this.unreported === 0) return this.total;
    const s = this.sum ?? { prompt: 0, completion: 0, cached: 0, cacheReported: false };
    return { ...s, completion: Math.min(Number.MAX_SAFE_INTEGER, s.completion + this.unreported) };
  }
}

/** A response's output delta (text, audio, transcript, a call's arguments; either API's names), by its type in a message's head. */
const OUTPUT_DELTA = /"type"\s*:\s*"response\.[a-z_.]*delta"/;
