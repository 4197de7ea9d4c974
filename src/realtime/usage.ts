import type { TokenUsage } from "../routing/protocol.ts";
import { usageOf } from "../stream/usage.ts";
import { eventType, outputEvent, type OutputEvent } from "./event-type.ts";

/**
 * The tokens a realtime session's backend reported: the end of each of its outputs carries that
 * output's usage (event-type.ts outputEvent: a `response.done` its response's, in input, output and
 * cached input tokens; vLLM's `transcription.done` and OpenAI's
 * `conversation.item.input_audio_transcription.completed` their transcription's), summed over the
 * session's life. Read for a virtual key that counts tokens (its budget, token limit or usage
 * records), and charged as it comes (workers/gateway/realtime.ts), the rest with the session's end.
 */
export class RealtimeUsage {
  private sum: TokenUsage | null = null;

  /**
   * Output deltas since the last end of their output, a response's and a transcription's apart
   * (OpenAI transcribes the input audio while a response is made): what one left before its end made.
   * `unclaimed`: a response's deltas while no response is open (none created, or all done), which
   * the next end of any output claims. vLLM-Omni speaks a transcription: a `response.audio.delta`
   * for each audio chunk, reported in its transcription.done, and no response.created or
   * response.done; counted as a response's, nothing ever ended them and a session its client
   * closed was charged them on top of what was reported. A backend that announces no response
   * ends its deltas with its response.done.
   */
  private readonly unreported = { response: 0, transcription: 0, unclaimed: 0 };

  /** Responses created (response.created) and not yet done: while one is, a response delta is its. */
  private openResponses = 0;

  /**
   * One message from the backend (a text frame); when it reported usage, all reported so far (a
   * copy). Most of a session's messages are deltas: only each one's head and end are searched for
   * its type (event-type.ts eventType), and only an output's end is parsed.
   */
  take(message: string): TokenUsage | null {
    const output = outputEvent(eventType(message));
    if (output === null) return null;
    if (output.is === "start") {
      this.openResponses++;
      return null;
    }
    if (output.is === "delta") {
      this.unreported[output.of === "response" && this.openResponses === 0 ? "unclaimed" : output.of]++;
      return null;
    }
    return this.done(message, output);
  }

  /**
   * An output's end: that output is over, whatever it reported (its deltas are no longer one left);
   * its usage added to the sum, and all reported so far (null when it reported none, or the message
   * is not the event its type as found named).
   */
  private done(message: string, output: OutputEvent): TokenUsage | null {
    let event: { type?: unknown; usage?: unknown; response?: { usage?: unknown } | null };
    try {
      event = JSON.parse(message) as typeof event;
    } catch {
      return null;
    }
    if (outputEvent(typeof event?.type === "string" ? event.type : null) !== output) return null;
    const deltas = this.unreported[output.of];
    this.unreported[output.of] = 0;
    this.unreported.unclaimed = 0;
    if (output.of === "response") this.openResponses = Math.max(0, this.openResponses - 1);
    const reported = output.of === "response" ? event.response?.usage : event.usage;
    // A transcription's usage may be a duration (OpenAI's `{type: "duration", seconds}`): no tokens to count.
    const u = typeof reported === "object" && reported !== null ? usageOf(reported) : null;
    if (!u) return null;
    // A transcription that sent text and reports no output tokens reported none at all (an early
    // vLLM's transcription.done says zeros, a TODO): charged as one left, a token a delta. Only
    // then, not the larger of the two: OpenAI's concurrent transcriptions share one count of
    // deltas, and one's end would charge the other's deltas, which its own end reports again.
    const completion = output.of === "transcription" && u.completionTokens === 0 ? deltas : u.completionTokens;
    const s = (this.sum ??= { prompt: 0, completion: 0, cached: 0, cacheReported: false });
    // Bounded as a reported count is: a sum past 2^53 would stop being a whole number.
    s.prompt = Math.min(Number.MAX_SAFE_INTEGER, s.prompt + u.promptTokens);
    s.completion = Math.min(Number.MAX_SAFE_INTEGER, s.completion + completion);
    s.cached = Math.min(s.prompt, s.cached + u.cachedTokens);
    return { ...s };
  }

  /**
   * What was reported, if any output was done. Its cached tokens price the prompt, but teach
   * routing nothing (`cacheReported` false): a session's prompt is never hashed, so there is no
   * prediction to set them against.
   */
  get total(): TokenUsage | undefined {
    // A copy: a release queued with it must not change with what the backend sends after.
    return this.sum ? { ...this.sum } : undefined;
  }

  /**
   * What a session its client left (or the gateway ended) is charged: what was reported, and an
   * output token for every delta of a response or transcription whose end never came — else a
   * client that reads each one and leaves before its end is charged nothing for any (vLLM stops a
   * transcription whose client left, and reports nothing). A floor for audio, whose deltas carry
   * several tokens each; as the estimate of a stream a client left is (src/tenants/estimate.ts),
   * one token an event.
   */
  get totalIfLeft(): TokenUsage | undefined {
    const unreported = this.unreported.response + this.unreported.transcription + this.unreported.unclaimed;
    if (unreported === 0) return this.total;
    const s = this.sum ?? { prompt: 0, completion: 0, cached: 0, cacheReported: false };
    return { ...s, completion: Math.min(Number.MAX_SAFE_INTEGER, s.completion + unreported) };
  }
}
