import type { TokenUsage } from "../routing/protocol.ts";
import { usageOf, type Usage } from "../stream/usage.ts";
import { eventType, outputEvent, type OutputEvent } from "./event-type.ts";

/**
 * The tokens a realtime session's backend reported: the end of each of its outputs carries that
 * output's usage (event-type.ts outputEvent: a `response.done` its response's, in input, output and
 * cached input tokens; vLLM's `transcription.done` and OpenAI's
 * `conversation.item.input_audio_transcription.completed` their transcription's), summed over the
 * session's life; an end that reports no output tokens is charged its output's deltas, a token each
 * (chargedAtEnd). Read for a virtual key that counts tokens (its budget, token limit or usage
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
   * One message from the backend (a text frame); when it ended an output that is charged something,
   * all charged so far (a copy). Most of a session's messages are deltas: only each one's head and end are searched for
   * its type (event-type.ts eventType), and only an output's end is parsed.
   */
  take(message: string): TokenUsage | null {
    const type = eventType(message);
    if (type === "error") {
      this.brokenOff(message);
      return null;
    }
    const output = outputEvent(type);
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
   * what it is charged added to the sum, and all charged so far (null when it is charged nothing:
   * no usage and no deltas, or the message is not the event its type as found named).
   */
  private done(message: string, output: OutputEvent): TokenUsage | null {
    let event: { type?: unknown; usage?: unknown; response?: { usage?: unknown; status?: unknown } | null };
    try {
      event = JSON.parse(message) as typeof event;
    } catch {
      return null;
    }
    if (outputEvent(typeof event?.type === "string" ? event.type : null) !== output) return null;
    // A response's own deltas include those sent while none was announced: a backend that announces
    // no response ends them with its response.done. A transcription's are its text's alone
    // (vLLM-Omni's audio chunks beside them are reported in its transcription.done).
    const deltas = this.unreported[output.of] + (output.of === "response" ? this.unreported.unclaimed : 0);
    this.unreported[output.of] = 0;
    this.unreported.unclaimed = 0;
    if (output.of === "response") this.openResponses = Math.max(0, this.openResponses - 1);
    // An output its backend failed (a response.done whose status says so, OpenAI's transcription
    // `…failed`) is spared its deltas, as a stream its backend broke off is: only what it reported counts.
    const failed = output.of === "response" ? event.response?.status === "failed" : event.type === TRANSCRIPTION_FAILED;
    const u = chargedAtEnd(output.of === "response" ? event.response?.usage : event.usage, failed ? 0 : deltas);
    if (!u) return null;
    const s = (this.sum ??= { prompt: 0, completion: 0, cached: 0, cacheReported: false });
    // Bounded as a reported count is: a sum past 2^53 would stop being a whole number.
    s.prompt = Math.min(Number.MAX_SAFE_INTEGER, s.prompt + u.promptTokens);
    s.completion = Math.min(Number.MAX_SAFE_INTEGER, s.completion + u.completionTokens);
    s.cached = Math.min(s.prompt, s.cached + u.cachedTokens);
    return { ...s };
  }

  /**
   * A backend's `error` event, while a response is made: a `server_error` ends that response,
   * failed, as Speaches ends one its LLM failed (an error event, and no response.done). Its deltas
   * are spared, as a failed response.done's are; else the next response whose end reports no usage
   * would be charged them. Another error (a client event refused) leaves the response going.
   */
  private brokenOff(message: string): void {
    if (this.openResponses === 0) return;
    let event: { error?: { type?: unknown } | null } | null;
    try {
      event = JSON.parse(message) as typeof event;
    } catch {
      return;
    }
    if (event?.error?.type !== "server_error") return;
    this.unreported.response = 0;
    this.openResponses--;
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

/** OpenAI's end of a transcription of the input audio that failed. */
const TRANSCRIPTION_FAILED = "conversation.item.input_audio_transcription.failed";

/**
 * What an output whose end reported `reported` (its usage field, as it came) after `deltas` deltas
 * of its own is charged: the tokens it reported; or, when it reported no output tokens, a token a
 * delta as completion tokens, as an output left before its end is (RealtimeUsage.totalIfLeft) — an
 * end that carries no usage (Speaches' response.done says null), a duration (OpenAI's whisper-1
 * transcription: `{type: "duration", seconds}`) or zeros (an early vLLM's transcription.done, a TODO)
 * is no free output. Only then, not the larger of the two: OpenAI's concurrent transcriptions share
 * one count of deltas, and one's end would charge the other's deltas, which its own end reports
 * again. Null: nothing to charge (no usage, and no deltas: a duration-billed transcription that sent
 * its text in its end alone stays free).
 */
function chargedAtEnd(reported: unknown, deltas: number): Usage | null {
  const u = typeof reported === "object" && reported !== null ? usageOf(reported) : null;
  if (u && u.completionTokens > 0) return u;
  if (!u && deltas === 0) return null;
  return { promptTokens: u?.promptTokens ?? 0, completionTokens: deltas, cachedTokens: u?.cachedTokens ?? 0, cacheReported: false };
}
