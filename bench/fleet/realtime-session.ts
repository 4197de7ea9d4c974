import type { RawData, WebSocket } from "ws";
import { isRecord } from "./is-record.ts";
import { outputText } from "./output-text.ts";
import { BYTES_PER_TOKEN } from "./prompt-blocks.ts";
import { later, type WorkerContext } from "./worker-context.ts";

/**
 * One realtime conversation as OpenAI's realtime API holds it, in text only and in its minimal
 * form: `session.created` on connect; a client's `response.create` answered by `response.created`,
 * one `response.text.delta` per output token at the worker's decode pace, `response.text.done`
 * and `response.done` (with usage); `session.update` and `conversation.item.create` acknowledged.
 * Two things for tests: a binary message is echoed back as it came (the API itself carries audio
 * as base64 in JSON), and a `kvgate_sim.close` event (`code`, `reason`) makes the worker close the
 * socket with that code, as a server ending a session does.
 */
export function runRealtimeSession(ctx: WorkerContext, ws: WebSocket, model: string): void {
  const tag = `sim${ctx.config.index}-${(ctx.nextId++).toString(36)}`;
  let events = 0;
  const send = (type: string, fields: Record<string, unknown>): void => {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ event_id: `event_${tag}_${events++}`, type, ...fields }));
  };
  const fail = (code: string, message: string, clientEventId: unknown): void =>
    send("error", { error: { type: "invalid_request_error", code, message, param: null, event_id: typeof clientEventId === "string" ? clientEventId : null } });

  const session = { id: `sess_${tag}`, object: "realtime.session", model, modalities: ["text"] };
  send("session.created", { session });
  let responses = 0;

  // A frame ws refuses (text that is not UTF-8, unmasked, a bad close code, too big) is an 'error'
  // after ws has already sent the close (1007, 1002, 1009): nothing is left to do, but with no
  // listener the error would end the process, and with it every worker (and npm start's gateway).
  ws.on("error", () => {});
  ws.on("message", (data: RawData, isBinary: boolean) => {
    if (isBinary) return ws.send(data, { binary: true });
    let event: unknown;
    try {
      event = JSON.parse(data.toString());
    } catch {
      return fail("invalid_json", "The event is not valid JSON.", null);
    }
    if (!isRecord(event)) return fail("invalid_event", "The event must be a JSON object.", null);
    switch (event.type) {
      case "session.update":
        return send("session.updated", { session: { ...session, ...(isRecord(event.session) ? event.session : {}) } });
      case "conversation.item.create":
        return send("conversation.item.created", { previous_item_id: null, item: isRecord(event.item) ? event.item : {} });
      case "response.create": {
        const tokens = outputTokens(event.response, ctx.config.defaultMaxTokens);
        if (tokens === null) return fail("invalid_value", `response.max_output_tokens must be an integer from 1 to ${MAX_OUTPUT_TOKENS} or "inf".`, event.event_id);
        return respond(`resp_${tag}_${responses}`, `item_${tag}_${responses++}`, tokens);
      }
      case "kvgate_sim.close":
        try {
          return ws.close(typeof event.code === "number" ? event.code : 1000, typeof event.reason === "string" ? event.reason : "");
        } catch (e) {
          return fail("invalid_value", (e as Error).message, event.event_id);
        }
      default:
        return fail("invalid_value", `Unknown event type ${JSON.stringify(event.type)}.`, event.event_id);
    }
  });

  const respond = (id: string, itemId: string, tokens: number): void => {
    const text = outputText(tokens);
    const at = { response_id: id, item_id: itemId, output_index: 0, content_index: 0 };
    send("response.created", { response: { id, object: "realtime.response", status: "in_progress", output: [], usage: null } });
    const stepMs = ctx.cost.stepMs(0, 0, 1, 1);
    let sent = 0;
    const next = (): void => {
      while (ws.readyState === ws.OPEN && sent < tokens) {
        send("response.text.delta", { ...at, delta: text.slice(sent * BYTES_PER_TOKEN, ++sent * BYTES_PER_TOKEN) });
        if (stepMs > 0) return later(ctx, stepMs, next);
      }
      if (sent < tokens) return;
      send("response.text.done", { ...at, text });
      const item = { id: itemId, object: "realtime.item", type: "message", role: "assistant", status: "completed", content: [{ type: "text", text }] };
      send("response.done", { response: { id, object: "realtime.response", status: "completed", output: [item], usage: { input_tokens: 0, output_tokens: tokens, total_tokens: tokens } } });
    };
    next();
  };
}

/** The API's own bound on a response's output tokens. */
const MAX_OUTPUT_TOKENS = 4096;

/** response.max_output_tokens, or the worker's default; null when it is not a count the API takes. */
function outputTokens(response: unknown, fallback: number): number | null {
  const limit = isRecord(response) ? response.max_output_tokens : undefined;
  if (limit === undefined || limit === "inf") return fallback;
  return typeof limit === "number" && Number.isInteger(limit) && limit >= 1 && limit <= MAX_OUTPUT_TOKENS ? limit : null;
}
