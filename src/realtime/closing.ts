import type { LeaseOutcome } from "../routing/protocol.ts";
import { REDACTED, withoutSecrets } from "../upstream/error-body.ts";

/**
 * How one side's close reaches the other side of a relayed WebSocket, and what the upstream's
 * close says about the backend. Pure: the Worker's relay only carries it out.
 */

/** A close to send: no code at all (the peer then sees 1005), or a code and its reason. */
export type CloseFrame = { code?: number; reason?: string };

/** Codes that are never sent in a close frame (RFC 6455 §7.4.1): they only describe a close. */
const NO_STATUS = 1005;
const ABNORMAL = 1006;

/** Sent to the client when the upstream's connection broke without a close frame (1014: bad gateway). */
export const UPSTREAM_LOST: Required<CloseFrame> = { code: 1014, reason: "upstream connection lost" };
/** Sent to the upstream when the client's connection broke without a close frame (1001: going away). */
export const CLIENT_LOST: Required<CloseFrame> = { code: 1001, reason: "client connection lost" };
/** Sent to both sides when the gateway ends a session whose key it no longer takes (1008: policy violation). */
export const POLICY_VIOLATION = 1008;

/** A code a WebSocket may send: 1000–1003, 1007–1014 (1004 is reserved), 3000–4999. */
export function isSendable(code: number): boolean {
  return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1014) || (code >= 3000 && code <= 4999);
}

/**
 * The close to pass on for a close one side received: its code and reason as they came; no code
 * for 1005 (none was sent); `lost` for a connection that broke (1006) or a code no endpoint may send.
 * `secrets`: what the gateway sent the side that closed that is secret (an upstream's key, its
 * secret headers' values), taken out of the reason as they are of an upstream's error body
 * (src/upstream/error-body.ts): a server may echo what it was sent ("bad key …").
 */
export function forwardedClose(code: number, reason: string, lost: Required<CloseFrame>, secrets: readonly string[] = []): CloseFrame {
  if (code === NO_STATUS) return {};
  if (code === ABNORMAL || !isSendable(code)) return lost;
  // A reason that came as bytes not UTF-8 arrives decoded, each bad byte a U+FFFD of 3: it may be past
  // the frame's bound, and a close with it the runtime refuses to send.
  return { code, reason: secrets.length === 0 || reason === "" ? closeReason(reason) : reasonWithoutSecrets(reason, secrets) };
}

/** A close frame's reason, in UTF-8: its payload is 125 bytes, two of them the code. */
const MAX_REASON_BYTES = 123;
/** A reason's last characters that begin a secret are taken out from this many on: fewer tell nothing. */
const CUT_SECRET_MIN_CHARS = 4;

/**
 * `reason` with each secret replaced, and a secret's beginning it ends with (the server cut the
 * reason at the frame's bound) too; then cut to the bound again, at a character's edge, since a
 * replacement may be longer than a short secret — a reason past it the runtime refuses to send.
 */
function reasonWithoutSecrets(reason: string, secrets: readonly string[]): string {
  let out = withoutSecrets(reason, secrets);
  for (const secret of secrets) {
    for (let n = Math.min(secret.length - 1, out.length); n >= CUT_SECRET_MIN_CHARS; n--) {
      if (out.endsWith(secret.slice(0, n))) {
        out = `${out.slice(0, out.length - n)}${REDACTED}`;
        break;
      }
    }
  }
  return cutToBytes(out, MAX_REASON_BYTES);
}

/** `text` as a close frame's reason: cut to the frame's bound, at a character's edge (the runtime refuses to send a longer one). */
export function closeReason(text: string): string {
  return cutToBytes(text, MAX_REASON_BYTES);
}

function cutToBytes(text: string, max: number): string {
  const bytes = new TextEncoder().encode(text);
  if (bytes.length <= max) return text;
  // A cut inside a character leaves a replacement character: dropped with it.
  return new TextDecoder().decode(bytes.subarray(0, max)).replace(/\uFFFD$/, "");
}

/** RFC 6455's unsupported data, invalid payload data and message too big: the peer's message refused. */
const REFUSED_WHAT_CLIENT_SENT: ReadonlySet<number> = new Set([1003, 1007, 1009]);

/**
 * A backend's close that says it failed the session, whatever it sent before: 1006 (the
 * connection broke without a close frame), 1011 (internal error), 1014 (a gateway whose own
 * upstream failed), and the server leaving it — 1001 (going away: uvicorn shutting down), 1012
 * (service restart), 1013 (try again later: overloaded, restarting). What such a close cut short is
 * the backend's breaking off, as a stream's lost connection is, not a session it served.
 */
const BACKEND_FAILED: ReadonlySet<number> = new Set([ABNORMAL, 1001, 1011, 1012, 1013, 1014]);

/**
 * What an upstream's close says about its backend. A close of BACKEND_FAILED's (a broken
 * connection, 1011, 1014; a server going away, restarting or overloaded: 1001, 1012, 1013) is a
 * failure, before or after it served: a rolling restart of vLLM mid-transcription earns no
 * breaker success, and the output it cut off is not charged (workers/gateway/socket-relay.ts),
 * as a stream the backend broke off is not. Otherwise a session is one it served only once it sent
 * something its engine made, past its server layer's own events (`served`; src/realtime/event-type.ts
 * backendEvent): an engine that accepts the upgrade and hangs, its server greeting the session with
 * `session.created` as vLLM's does before it asks the engine anything (or acknowledging what it is
 * asked), or closes at once, must not earn its breaker's
 * successes nor tell the silence rule it serves (src/routing/silence.ts); any other close before
 * such a message is no verdict. A close
 * that refuses what the client sent (1003, 1007, 1009: a message the server does not take, one
 * not valid, one too big — uvicorn's ws_max_size) ended the session for the client's message, not
 * as one served: no verdict, whatever came before, nor a breaker success.
 */
export function upstreamCloseOutcome(code: number, served: boolean): LeaseOutcome {
  if (BACKEND_FAILED.has(code)) return "upstream-error";
  if (REFUSED_WHAT_CLIENT_SENT.has(code)) return "client-abort";
  return served ? "ok" : "client-abort";
}

/**
 * What a client's close says about the backend: a session the client ended with a close frame is
 * one the backend served to its end, once the backend sent something its engine made
 * (`served`); before that, or
 * when the client's connection broke (1006), the client left, as a client that hangs up on a
 * stream does, which says nothing about the backend.
 */
export function clientCloseOutcome(code: number, served: boolean): LeaseOutcome {
  return served && code !== ABNORMAL ? "ok" : "client-abort";
}
