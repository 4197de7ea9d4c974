import type { ResolvedDeployment, ResolvedGroup } from "../../src/config/load.ts";
import { badGateway, GatewayError, gatewayTimeout } from "../../src/openai/errors.ts";
import { NONE_ANNOUNCED, sessionIntent, transcriberFor } from "../../src/realtime/session-model.ts";
import { classifyRefusedUpgrade } from "../../src/realtime/upgrade-answer.ts";
import type { LeaseOutcome, RouteDecision } from "../../src/routing/protocol.ts";
import { SILENT, type AttemptEnd, type Routed } from "./route-client.ts";
import { backendAsSeen, clientError, FAILURE_CAUSE, failureKind, isBackendsOwn, isGatewaysFailure } from "../../src/upstream/answer.ts";
import { parseUpstreamError } from "../../src/upstream/error-body.ts";
import { fetchDeployment, type Reachable } from "../../src/upstream/reach-fetch.ts";
import { readBounded } from "../../src/upstream/read-bounded.ts";
import { parseRetryAfter, type Failure } from "../../src/upstream/retry.ts";

const UPSTREAM_PATH = "/v1/realtime";
/** Speaches' handshake query parameter for a session's transcription model (its extension of OpenAI's: session-model.ts SessionPins). */
const TRANSCRIPTION_MODEL = "transcription_model";

/** One backend's answer to the handshake: its socket, or why not and what that says about the backend. */
export type Handshake =
  | { kind: "open"; socket: WebSocket; protocol: string | null }
  /** The client's fault (a 4xx the upstream judged): passed on, no verdict, not retried. */
  | { kind: "rejected"; response: Response }
  /**
   * Another backend might accept: `verdict` is what this says about the backend, settled or held by
   * the caller (held-failure.ts), with `end` (a timeout with no answer: SILENT).
   */
  | { kind: "failed"; response: Response; verdict: LeaseOutcome; failure: Failure; end?: AttemptEnd };

export interface HandshakeInput {
  /** The client's query string (`?model=…&…`): passed on with the model rewritten to the deployment's (and a virtual key's `transcription_model` too, or dropped). */
  search: string;
  /** How the deployment is reached (its binding, its bearer — never the client's key — and extra headers), as a request would be. */
  reach: Reachable;
  /** The id the engine is sent as x-request-id (request-id.ts's engineRequestId). */
  requestId: string;
  group: ResolvedGroup;
  deployment: ResolvedDeployment;
  decision: Routed;
  /** The subprotocols the client offered, the key taken out. */
  protocols: readonly string[];
  /** Aborts when the client disconnects: the handshake is then cancelled. */
  clientSignal: AbortSignal;
  /** The caller owns the deployment (the master key): its errors name the backend by id (backendAsSeen), and its `transcription_model` passes. */
  owner: boolean;
}

/**
 * Opens the upstream's socket: a fetch with Upgrade: websocket to the deployment's
 * /v1/realtime, with the deployment's model, sent the way every call to it goes (its binding, its
 * own key — never the client's — and its extra headers: src/upstream/reach-fetch.ts), answered
 * within the group's firstByteTimeoutMs, and cancelled when the client leaves first (the caller
 * reads that from the client's signal, whatever this answers). An answer that is not a 101 means what it means for any
 * request (src/realtime/upgrade-answer.ts); its body is read only so far.
 */
export async function openUpstream(h: HandshakeInput): Promise<Handshake> {
  const { deployment, group } = h;
  const query = new URLSearchParams(h.search);
  query.set("model", deployment.model);
  // A server of many models (Speaches) transcribes with the model its query's transcription_model
  // names: a virtual key's is the deployment's in a transcription session, and in a conversation
  // (whose model is the LLM) dropped, the server's default applying (src/realtime/session-model.ts).
  if (!h.owner && query.has(TRANSCRIPTION_MODEL)) {
    const transcriber = transcriberFor(sessionIntent(h.search), deployment.model, NONE_ANNOUNCED);
    if (transcriber === null) query.delete(TRANSCRIPTION_MODEL);
    else query.set(TRANSCRIPTION_MODEL, transcriber);
  }
  const headers: Record<string, string> = { upgrade: "websocket", "x-request-id": h.requestId, "x-kvgate-routed-at": String(h.decision.routedAt) };
  if (h.protocols.length > 0) headers["sec-websocket-protocol"] = h.protocols.join(", ");
  const failed = (err: GatewayError, verdict: LeaseOutcome, failure: Failure, end?: AttemptEnd): Handshake => ({ kind: "failed", response: err.toResponse(), verdict, failure, end });

  // The abort also closes the connection the runtime opened (workerd sends its FIN at once), so a
  // hung engine tried again and again keeps none of the gateway's: test/e2e/realtime.test.ts.
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(new Error("upstream handshake timeout")), group.firstByteTimeoutMs);
  let up: Response;
  try {
    up = await fetchDeployment(h.reach, `${deployment.baseUrl}${UPSTREAM_PATH}?${query}`, { headers, signal: AbortSignal.any([abort.signal, h.clientSignal]), redirect: "manual" });
  } catch {
    // A handshake has no body a server could choke on, and takes no generation's time: no answer
    // (or no connection) is its backend's own, whatever another backend did with the same session
    // (held-failure.ts). Two hung engines do not end a session a third would serve.
    if (abort.signal.aborted) {
      // Silence, as a stream's first-token timeout is: a hung engine's /health says ok all the same.
      return failed(gatewayTimeout(`${backendAsSeen(deployment, group, h.owner)} did not answer the WebSocket handshake within ${group.firstByteTimeoutMs} ms`), "upstream-error", { cause: "timeout", kind: "timeout", retryAfterMs: null, backendsOwn: true }, SILENT);
    }
    // The runtime's message may carry the URL; the client gets the backend's name only.
    return failed(badGateway(`${backendAsSeen(deployment, group, h.owner)} could not be reached: the connection failed`), "upstream-error", { cause: "connect", kind: "connect", retryAfterMs: null, backendsOwn: true });
  } finally {
    clearTimeout(timer);
  }
  if (up.status === 101 && up.webSocket) return { kind: "open", socket: up.webSocket, protocol: up.headers.get("sec-websocket-protocol") };

  const retryAfter = up.headers.get("retry-after");
  const text = await readBounded(up.body);
  const said = parseUpstreamError(text, h.reach.secrets);
  const answer = classifyRefusedUpgrade(up.status, said, retryAfter, text === "", up.headers.get("content-type"));
  const err = clientError(up.status, answer, said, backendAsSeen(deployment, group, h.owner), retryAfter);
  if (answer.kind === "rejected") return { kind: "rejected", response: err.toResponse() };
  const limited = answer.kind === "rate-limited";
  const failure: Failure = { cause: limited ? "429" : FAILURE_CAUSE, kind: answer.kind === "backend-failure" ? failureKind(answer.why) : "rate-limited", retryAfterMs: up.status === 429 || up.status === 503 ? parseRetryAfter(retryAfter) : null };
  // A refused key (401), a redirect, a model not served: no request causes these, so none follows
  // one. No realtime endpoint may be every backend's (a fleet of chat engines), and a 403 a proxy's
  // for what the client's query holds: held for the group's word, as a request's are (held-failure.ts).
  if (answer.kind === "backend-failure" && isBackendsOwn(answer.why)) failure.backendsOwn = true;
  // A proxy's 502 or 504 refusing the upgrade, as an engine dead behind it gives: two alike go on to
  // a third backend, as a request's do (held-failure.ts awaitsAnotherBackend). Never the gateway's
  // own 504 above (no answer in time): that is the handshake's silence, its backend's own.
  const end: AttemptEnd | undefined = answer.kind === "backend-failure" && isGatewaysFailure(up.status) ? { viaGateway: true } : undefined;
  return failed(err, limited ? "rate-limited" : "upstream-error", failure, end);
}
