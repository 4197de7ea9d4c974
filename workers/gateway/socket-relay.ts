import { CLIENT_LOST, clientCloseOutcome, closeReason, forwardedClose, UPSTREAM_LOST, upstreamCloseOutcome, type CloseFrame } from "../../src/realtime/closing.ts";
import { backendEvent, clientAsks, clientEventId } from "../../src/realtime/event-type.ts";
import { BINARY_REFUSED, errorEvent } from "../../src/realtime/error-event.ts";
import { announcedModels, engineSessionRefusal, mayBeSessionUpdate, mayNameEngineSession, NONE_ANNOUNCED, pinSessionModel, unreadableEvent, type SessionIntent, type SessionPins } from "../../src/realtime/session-model.ts";
import { RealtimeUsage } from "../../src/realtime/usage.ts";
import type { LeaseOutcome, TokenUsage } from "../../src/routing/protocol.ts";
import { sessionMessageRefusal } from "./body.ts";
import type { HeldLease } from "./route-client.ts";

/** A relayed session, as the gateway may end it itself. */

/** How many of a backend's first text messages are looked at for its session.created (announcedModels): a type check of each, no more. */
const CREATED_WITHIN = 4;
export interface Relay {
  /**
   * Closes both sides with `frame`'s code, the client told its reason, the backend only that the
   * gateway ended it (the reason is the client's: a key's prefix, when it expired; cut to a close
   * frame's 123 bytes, which a refusal naming a long model or origin passes); and settles the
   * lease as a session the client's side ended: no verdict on the backend.
   */
  end(frame: Required<CloseFrame>): void;
  /** Runs `f` once the session has ended, whichever side (or `end`) ended it. */
  onEnd(f: () => void): void;
}

export interface RelayOptions {
  /** The deployment's model: what the client's session.update names is pinned to it (src/realtime/session-model.ts). */
  model: string;
  /** Told all the tokens the backend reported so far, each time it reports more; null: not read. */
  reported: ((soFar: TokenUsage) => void) | null;
  /** The group's streamIdleTimeoutMs, when set. */
  idleMs?: number | undefined;
  /** What the gateway sends the backend that is secret: taken out of the close reason the client is passed. */
  secrets: readonly string[];
  /** The most bytes a client's session.update, which the gateway parses, may hold: a request body's (limits.maxBodyBytes). */
  maxEventBytes: number;
  /**
   * A virtual key's session: a client event naming the engine's session (a session.update's session
   * id, a session.resume) is answered instead of passed on (src/realtime/session-model.ts
   * engineSessionRefusal), as its tenant could take or attach another's session; and the
   * transcription and speech models a session.update names are not the client's to choose
   * (pinSessionModel), as it could name another model its backend's server serves: they are the
   * ones the backend's first message, its session.created, announced (session-model.ts
   * announcedModels), or none.
   */
  virtualKey: boolean;
  /** What the session is for, as its handshake said (session-model.ts sessionIntent): which model a virtual key's transcription is. */
  intent: SessionIntent;
}

/**
 * Accepts and relays two WebSockets to each other — the client's end of a WebSocketPair and the
 * upstream's — message for message, text as text and the backend's binary as binary (the client's
 * session.update with its model pinned to the deployment's; its binary messages, and a
 * session.update past a request body's bounds, answered in the backend's stead), and passes each side's
 * close to the other with its code and reason. The lease is settled once, by whichever side ends
 * first, with what that side's close says about the backend (src/realtime/closing.ts: a normal
 * close is a session served only once the backend sent something its engine made); the backend's
 * first such message is told at once as its answer beginning (HeldLease.began), as a stream's
 * first token is; and the tokens the backend reported over the session when `reported` is given
 * (a virtual key that counts them), which is told all reported so far each time the backend
 * reports more. With `idleMs` (the group's streamIdleTimeoutMs), a session in which nothing moved
 * either way for that long, or whose backend owes a response (the client asked for one:
 * src/realtime/event-type.ts) and sent nothing for that long whatever its client sent meanwhile,
 * is ended as the gateway ends one (Relay.end), with 1001, as a stream whose backend stalls is:
 * nothing else bounds a stuck session.
 */
export function relaySockets(client: WebSocket, upstream: WebSocket, lease: HeldLease, { model, reported, idleMs, secrets, maxEventBytes, virtualKey, intent }: RelayOptions): Relay {
  const ended: (() => void)[] = [];
  let over = false;
  const usage = reported ? new RealtimeUsage() : null;
  // The backend sent a message its engine made, not its server layer's own (session.created,
  // response.created: a hung engine's server sends them too): only then is the session's normal end
  // one it served (closing.ts).
  let served = false;
  // An output cut short is charged what it sent (a token a delta) unless its backend failed: a
  // client that left, the gateway's end, and a backend's close that is no failure alike — the client
  // read those deltas, and a backend may end a session for what its client sent (vLLM's, on a message
  // it cannot read). A failed backend's cut output is spared, as a stream it broke off is: a lost
  // connection, 1011, 1014, and a server going away, restarting or overloaded (1001, 1012, 1013:
  // closing.ts upstreamCloseOutcome).
  const finish = (outcome: LeaseOutcome) => {
    if (over) return;
    over = true;
    const total = outcome === "upstream-error" ? usage?.total : usage?.totalIfLeft;
    lease.settle(outcome, total && { usage: total });
    for (const f of ended.splice(0)) f();
  };
  // What a client's session.update may name beside its model (session-model.ts SessionPins). A
  // virtual key's are the models its backend announced in its session.created, looked for in the
  // backend's first few text messages only (a server opens a session with it: Speaches', OpenAI's,
  // vLLM's; one may say something first): no later message is looked at for them, nor binary audio;
  // a session.update sent before it came names none.
  let pins: SessionPins = virtualKey ? { intent, announced: NONE_ANNOUNCED } : "owner";
  let createdLookedFor = virtualKey ? CREATED_WITHIN : 0;
  // Binary messages as ArrayBuffers: send() takes those, not the Blobs the runtime gives by default.
  client.binaryType = "arraybuffer";
  upstream.binaryType = "arraybuffer";
  // When the session last moved (the backend accepted it, or a side sent a message); read only when
  // its idleness is watched. While a response is owed, only the backend's answer moves it: a hung
  // backend's client may talk on (its audio, its request again) to no one, and its server layer
  // acknowledge it. Else the client's messages do too: a voice client streams audio a server answers
  // nothing to (vLLM answers a commit, not an append).
  let movedAt = Date.now();
  // What the client asked that the backend has not answered (event-type.ts clientAsks): a
  // response (response.create), which only its engine's output or an error answers, or a commit,
  // which its server's input_audio_buffer.committed answers too; null when nothing is owed.
  let owed: "response" | "commit" | null = null;
  // A text message as it came, unread and unbounded but by the runtime (32 MiB: an append may be
  // 15 MiB), unless it may be a session.update, its model pinned to the deployment's; answered in
  // the backend's stead when it is one past a request body's bounds (body.ts sessionMessageRefusal:
  // it is parsed), one naming the engine's session from a virtual key (a session.resume too,
  // session-model.ts engineSessionRefusal), or one that cannot be read, naming its event_id when its head or end does; or
  // when it is binary, which no realtime server reads (error-event.ts BINARY_REFUSED): false then,
  // as the backend was not asked.
  const answered = (event: string): false => {
    pass(client, event);
    return false;
  };
  const toBackend = (data: string | ArrayBuffer): boolean => {
    if (typeof data !== "string") return answered(BINARY_REFUSED);
    if (virtualKey ? mayNameEngineSession(data) : mayBeSessionUpdate(data)) {
      const refusal = sessionMessageRefusal(data, maxEventBytes) ?? (virtualKey ? engineSessionRefusal(data) : null);
      if (refusal) return answered(errorEvent(refusal, clientEventId(data)));
    }
    const pinned = pinSessionModel(data, model, pins);
    if (pinned === null) return answered(unreadableEvent(clientEventId(data)));
    pass(upstream, pinned);
    return true;
  };
  client.addEventListener(
    "message",
    idleMs === undefined
      ? (e) => toBackend(e.data)
      : (e) => {
          // The client's messages move the session while nothing is owed: what it says after asking
          // does not keep a backend that owes it an answer.
          if (owed === null) movedAt = Date.now();
          // A type check of a text message's head unless a response is owed; none on binary audio.
          const asks = owed !== "response" && typeof e.data === "string" ? clientAsks(e.data) : null;
          // One the gateway answered itself asked the backend nothing, and is owed nothing by it.
          if (toBackend(e.data) && (asks === "response" || (asks === "commit" && owed === null))) owed = asks;
        },
  );
  const fromBackend = (data: string | ArrayBuffer): void => {
    if (createdLookedFor > 0 && typeof data === "string") {
      createdLookedFor--;
      const announced = announcedModels(data, maxEventBytes);
      if (announced) {
        pins = { intent, announced };
        createdLookedFor = 0;
      }
    }
    // A type check of a message's head until the backend served, and while something is owed: none else.
    const event = !served || owed !== null ? backendEvent(data) : "engine";
    if (!served && event === "engine") {
      served = true;
      // The session's answer began, as a stream's first token does: told once to the silence rule
      // (LeaseRenewal.serving), which else saw a backend serving only sessions as one that served nothing.
      lease.began();
    }
    // Its server layer's own events (response.created) answer nothing and, while something is owed,
    // move nothing: a hung engine's server sends them too. A committed answers a commit only.
    if (event === "engine" || event === "error" || (event === "committed" && owed === "commit")) owed = null;
    if (owed === null) movedAt = Date.now();
    pass(client, data);
  };
  upstream.addEventListener(
    "message",
    usage
      ? (e) => {
          fromBackend(e.data);
          const soFar = !over && typeof e.data === "string" ? usage.take(e.data) : null;
          if (soFar) reported?.(soFar);
        }
      : (e) => fromBackend(e.data),
  );
  client.addEventListener("close", (e) => {
    finish(clientCloseOutcome(e.code, served));
    closeQuietly(upstream, forwardedClose(e.code, e.reason, CLIENT_LOST));
  });
  upstream.addEventListener("close", (e) => {
    finish(upstreamCloseOutcome(e.code, served));
    closeQuietly(client, forwardedClose(e.code, e.reason, UPSTREAM_LOST, secrets));
  });
  // The runtime reports a broken connection as an error (and, after a close, the connection's end).
  client.addEventListener("error", () => {
    finish("client-abort");
    closeQuietly(upstream, CLIENT_LOST);
  });
  upstream.addEventListener("error", () => {
    finish("upstream-error");
    closeQuietly(client, UPSTREAM_LOST);
  });
  client.accept();
  upstream.accept();
  const relay: Relay = {
    end(frame) {
      if (over) return;
      finish("client-abort");
      closeQuietly(client, { code: frame.code, reason: closeReason(frame.reason) });
      closeQuietly(upstream, { code: frame.code, reason: ENDED_BY_GATEWAY });
    },
    onEnd(f) {
      if (over) f();
      else ended.push(f);
    },
  };
  if (idleMs !== undefined) endWhenIdle(relay, idleMs, () => movedAt);
  return relay;
}

/**
 * Ends `relay` once `movedAt` (when the session last moved, as the relay counts it) is `idleMs`
 * old, with 1001 (going away: the gateway leaves a session nothing comes from; no error of either
 * side's). The silence does not say which side stopped (a client gone quiet, or an engine that
 * hung with a response owed, its client asking on), so no verdict on the backend: its slot is
 * freed, as the client's leaving frees it. One timer a session, re-armed for the time left:
 * nothing per message but a clock read.
 */
function endWhenIdle(relay: Relay, idleMs: number, movedAt: () => number): void {
  const frame = { code: GOING_AWAY, reason: `session idle for ${idleMs} ms` };
  const check = (): void => {
    const quietMs = Date.now() - movedAt();
    if (quietMs >= idleMs) relay.end(frame);
    else timer = setTimeout(check, idleMs - quietMs);
  };
  let timer = setTimeout(check, idleMs);
  relay.onEnd(() => clearTimeout(timer));
}

/** RFC 6455's "going away": sent to both sides of a session the gateway ends for its idleness. */
const GOING_AWAY = 1001;

/** What the backend of a session the gateway ended is told. */
const ENDED_BY_GATEWAY = "session ended by the gateway";

/** Closes an upstream's socket that no client will use (the client left during the handshake). */
export function closeUnused(upstream: WebSocket): void {
  upstream.accept();
  closeQuietly(upstream, CLIENT_LOST);
}

function pass(to: WebSocket, data: string | ArrayBuffer): void {
  try {
    to.send(data);
  } catch {
    // That side is closing: its own close event ends the relay.
  }
}

function closeQuietly(ws: WebSocket, frame: CloseFrame): void {
  try {
    ws.close(frame.code, frame.reason);
  } catch {
    // Already closed, or closing: nothing more to tell it.
  }
}
