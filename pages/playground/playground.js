// @ts-check
/**
 * /playground: a chat with any model of the gateway, streamed, with the key a person pastes (the
 * master key or a virtual key). Under each reply, what the gateway says it did (the x-kvgate-*
 * headers); "Send again" sends the same conversation once more, to watch it come back as
 * prefix-hit on the backend that now holds its prefix. The backend, reason and prefix blocks are
 * the master key's to see (a virtual key is not told what other tenants' prompts left cached).
 */
import { apiError, byId, call, el, keyForm, listAnswer, lostConnection, reach, READ_TIMEOUT_MS, say } from "../shared/api.js";
import { sseEvents } from "./sse-events.js";

/** @typedef {{ role: "system" | "user" | "assistant", content: string }} Message */
/** A stream's delta or a whole answer's message, as far as the page reads it. @typedef {{ content?: unknown, reasoning_content?: unknown, reasoning?: unknown }} Delta */
/** @typedef {{ object: "list", data: { id: string }[] }} ModelList */
/** @typedef {{ item: HTMLLIElement, thinking: HTMLElement, text: HTMLElement, routes: HTMLUListElement }} Reply */
/** A piece of a reply: of the model's thinking (a reasoning model's), or of its answer. @typedef {{ part: "thinking" | "answer", text: string }} Piece */

const status = byId("status", HTMLElement);
const chat = byId("chat", HTMLFormElement);
const modelSelect = byId("model", HTMLSelectElement);
const systemPrompt = byId("system", HTMLTextAreaElement);
const messageBox = byId("message", HTMLTextAreaElement);
const maxTokens = byId("max-tokens", HTMLInputElement);
const conversation = byId("conversation", HTMLOListElement);
const sendButton = byId("send", HTMLButtonElement);
const againButton = byId("again", HTMLButtonElement);
const stopButton = byId("stop", HTMLButtonElement);

/** The headers under each reply, with the label each is shown with. */
const ROUTE_HEADERS = /** @type {const} */ ([
  ["backend", "x-kvgate-backend", "backend"],
  ["reason", "x-kvgate-reason", "reason"],
  ["prefix", "x-kvgate-prefix-blocks", "prefix blocks matched"],
  ["overhead", "x-kvgate-overhead-ms", "overhead ms"],
]);

/**
 * The most of a reply the playground shows, in characters (UTF-16 code units): more than any model
 * writes in one reply (a quarter of a million tokens or so), and well under what the tab can hold.
 * A reply that goes past it is cut there and its request let go: an upstream that streams without
 * end, as fast as it can, froze the tab within seconds (27 MB of text in the first 15 s, the page
 * answering nothing after that, Stop included).
 */
const REPLY_MAX_CHARS = 1_000_000;
const REPLY_MAX_SAID = REPLY_MAX_CHARS.toLocaleString("en");
/**
 * The longest event, or answer whole as JSON, the playground reads, in characters: room for the
 * most a reply shows in one, every character written as a JSON escape (\uXXXX, six), and its JSON
 * around it. An upstream that writes on with no blank line (broken, passed on untouched on the
 * master key's fast path) never ends its event, and one that writes on in a JSON answer never ends
 * that: held on, either would grow in the tab as an endless reply did.
 */
const EVENT_MAX_CHARS = 8_000_000;
const EVENT_MAX_SAID = EVENT_MAX_CHARS.toLocaleString("en");
/** @param {string} what */
const tooLong = (what) => new Error(`${what} longer than ${EVENT_MAX_SAID} characters: the playground reads no further`);
byId("reply-max", HTMLElement).textContent = `A reply shows up to ${REPLY_MAX_SAID} characters; one that goes past is cut there, and its request ended.`;

/** @type {string | null} */
let apiKey = null;
/** The conversation as sent: user turns and the replies that came back. */
/** @type {Message[]} */
let turns = [];
/** The last reply, which "Send again" writes over. */
/** @type {Reply | null} */
let lastReply = null;
/** @type {AbortController | null} */
let streaming = null;

/** @param {unknown} answer @returns {ModelList} */
const modelList = (answer) => /** @type {ModelList} */ (listAnswer(answer, "id", "/v1/models", "model list"));

keyForm({
  form: byId("key-form", HTMLFormElement),
  input: byId("api-key", HTMLInputElement),
  forget: byId("forget-key", HTMLButtonElement),
  status,
  storageName: "kvgate.apiKey",
  check: async (key) => modelList(await call(key, "/v1/models", { signal: AbortSignal.timeout(READ_TIMEOUT_MS) })),
  use(key, list) {
    const chosen = modelSelect.value;
    modelSelect.replaceChildren(...list.data.map((m) => el("option", { value: m.id }, m.id)));
    if (list.data.some((m) => m.id === chosen)) modelSelect.value = chosen;
    apiKey = key;
    chat.hidden = false;
    say(status, list.data.length === 0 ? "This key may call no model." : `Key accepted: ${list.data.length} model${list.data.length === 1 ? "" : "s"} to choose from.`);
  },
  dropped() {
    streaming?.abort();
    apiKey = null;
    chat.hidden = true;
  },
});

chat.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = messageBox.value.trim();
  if (!text || streaming) return;
  messageBox.value = "";
  turns.push({ role: "user", content: text });
  conversation.append(el("li", { class: "user" }, el("strong", {}, "You: "), text));
  lastReply = newReply();
  void send(lastReply);
});

messageBox.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) chat.requestSubmit();
});

againButton.addEventListener("click", () => {
  if (!lastReply || streaming) return;
  // The reply being replaced leaves the conversation: the same messages go out again.
  if (turns.at(-1)?.role === "assistant") turns.pop();
  void send(lastReply);
});

stopButton.addEventListener("click", () => streaming?.abort());

byId("clear", HTMLButtonElement).addEventListener("click", () => {
  streaming?.abort();
  turns = [];
  lastReply = null;
  conversation.replaceChildren();
  againButton.disabled = true;
  messageBox.focus();
});

/** @returns {Reply} */
function newReply() {
  const thinking = el("div", { class: "reply-thinking", hidden: "" });
  const text = el("div", { class: "reply-text" });
  const routes = el("ul", { class: "routes", "aria-label": "How the gateway routed each send" });
  const item = el("li", { class: "assistant" }, el("strong", {}, "Assistant: "), thinking, text, routes);
  conversation.append(item);
  return { item, thinking, text, routes };
}

/**
 * Sends the conversation and streams the answer into `reply`; one more route line under it.
 * @param {Reply} reply
 */
async function send(reply) {
  if (apiKey === null) return;
  const controller = new AbortController();
  streaming = controller;
  setBusy(true);
  // The reply grows in one text node: what came is added to it, not the whole reply written again
  // (20,000 events wrote 1.2 billion characters into the page, and took seconds to show).
  const shown = document.createTextNode("");
  reply.text.replaceChildren(shown);
  const thought = document.createTextNode("");
  reply.thinking.replaceChildren(el("strong", {}, "Thinking: "), thought);
  reply.thinking.hidden = true;
  const write = { answer: frameWriter(shown), thinking: frameWriter(thought) };
  reply.item.dataset.done = "false";
  /** @type {Message[]} */
  const messages = systemPrompt.value.trim() ? [{ role: "system", content: systemPrompt.value.trim() }, ...turns] : [...turns];
  /** @type {Record<string, unknown>} */
  const body = { model: modelSelect.value, stream: true, messages };
  const max = Number.parseInt(maxTokens.value, 10);
  if (Number.isInteger(max) && max > 0) body.max_tokens = max;
  let answer = "";
  /** What the reply shows, thinking and answer: what REPLY_MAX_CHARS bounds. */
  let length = 0;
  // The conversation this send belongs to: "Clear" starts another while the reply still streams.
  const into = turns;
  try {
    const res = await reach("/v1/chat/completions", {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: controller.signal,
    });
    if (!res.ok) throw await apiError(res);
    reply.routes.append(routeLine(res.headers, reply.routes.children.length + 1));
    let cut = false;
    try {
      for await (const { part, text } of replyPieces(res)) {
        const room = REPLY_MAX_CHARS - length;
        const kept = text.length > room ? withoutHalfPair(text.slice(0, room)) : text;
        length += kept.length;
        if (part === "answer") answer += kept;
        else reply.thinking.hidden = false;
        write[part].add(kept);
        // Leaving the loop cancels the stream (bodyText's finally): the backend is let go.
        if (text.length > room) {
          cut = true;
          break;
        }
      }
    } finally {
      write.thinking.now();
      write.answer.now();
    }
    if (cut) {
      reply.text.append(el("em", { class: "error" }, ` [cut at ${REPLY_MAX_SAID} characters: the playground shows no more of a reply]`));
      say(status, `Reply cut at ${REPLY_MAX_SAID} characters.`);
    } else {
      const reason = res.headers.get("x-kvgate-reason");
      say(status, reason === null ? "Reply done." : `Reply done (${reason} on ${res.headers.get("x-kvgate-backend") ?? "?"}).`);
    }
  } catch (e) {
    const aborted = e instanceof DOMException && e.name === "AbortError";
    reply.text.append(el("em", { class: "error" }, aborted ? " [stopped]" : ` [${e instanceof Error ? e.message : String(e)}]`));
    say(status, aborted ? "Stopped." : "The request failed.", !aborted);
  } finally {
    if (answer !== "") into.push({ role: "assistant", content: answer });
    reply.item.dataset.done = "true";
    if (streaming === controller) streaming = null;
    setBusy(false);
  }
}

/**
 * Adds text to `node` once a frame, all that came since the last: adding to a text node copies
 * all of its text, so a fast stream's every event added on its own costs the reply's length each
 * time (150,000 events in a few seconds left the tab answering nothing for 2.5 s at a time).
 * `now` adds what waits at once (before what follows the reply's text).
 * @param {Text} node
 */
function frameWriter(node) {
  let waiting = "";
  let frame = 0;
  const now = () => {
    cancelAnimationFrame(frame);
    frame = 0;
    if (waiting !== "") node.appendData(waiting);
    waiting = "";
  };
  return {
    now,
    /** @param {string} text */
    add(text) {
      waiting += text;
      if (frame === 0) frame = requestAnimationFrame(now);
    },
  };
}

/**
 * `text` without a last high surrogate, the first half of a character cut in two.
 * @param {string} text
 */
const withoutHalfPair = (text) => (/[\uD800-\uDBFF]$/.test(text) ? text.slice(0, -1) : text);

/** @param {boolean} busy */
function setBusy(busy) {
  sendButton.disabled = busy;
  stopButton.disabled = !busy;
  againButton.disabled = busy || lastReply === null;
}

/**
 * "Send 2: backend sim-1 · reason prefix-hit · prefix blocks matched 3/3 · overhead ms 0.84": the
 * headers the answer has. A virtual key's has no backend, reason or prefix blocks (other tenants'
 * prompts decide them): its line says whose they are to see.
 * @param {Headers} headers
 * @param {number} n
 */
function routeLine(headers, n) {
  const li = el("li", { "data-send": String(n) }, `Send ${n}: `);
  ROUTE_HEADERS.filter(([, header]) => headers.has(header)).forEach(([field, header, label], i) => {
    if (i > 0) li.append(" · ");
    li.append(`${label} `, el("span", { "data-field": field }, headers.get(header) ?? ""));
  });
  if (!headers.has("x-kvgate-backend")) li.append(" (where a reply went is the master key's to see)");
  return li;
}

/**
 * The pieces of the reply `res` brings: a stream's as they come, or a chat completion's answered
 * whole as JSON (a server that ignores `stream`, whose answer the gateway passes on as it is: read
 * as events, it showed an empty reply, "Reply done").
 * @param {Response} res
 * @returns {AsyncGenerator<Piece>}
 */
async function* replyPieces(res) {
  if (!res.body) throw new Error("the answer has no body");
  if ((res.headers.get("content-type") ?? "").includes("application/json")) return yield* wholePieces(res.body);
  yield* streamedPieces(res.body);
}

/**
 * The pieces of a chat completion answered whole. Read as it comes, not with res.json(): an answer
 * that writes on without end (or past any reply's length) is given up at EVENT_MAX_CHARS, as an
 * unended event is, where it filled the tab until it froze.
 * @param {ReadableStream<Uint8Array>} body
 * @returns {AsyncGenerator<Piece>}
 */
async function* wholePieces(body) {
  let text = "";
  for await (const chunk of bodyText(body)) {
    text += chunk;
    if (text.length > EVENT_MAX_CHARS) throw tooLong("an answer");
  }
  const answer = /** @type {{ error?: unknown, choices?: { message?: Delta }[] }} */ (JSON.parse(text));
  if (answer.error) throw new Error(errorMessage(answer.error));
  const message = answer.choices?.[0]?.message;
  if (typeof message !== "object" || message === null) throw new Error("the answer is JSON but no chat completion");
  yield* pieces(message);
}

/**
 * The thinking and the answer in a delta or a message. The thinking is `reasoning_content` (vLLM's,
 * SGLang's, DeepSeek's) or `reasoning` (vLLM's newer name, OpenRouter's); a server that writes both
 * writes the same text, shown once.
 * @param {Delta} d
 * @returns {Generator<Piece>}
 */
function* pieces(d) {
  const thinking = typeof d.reasoning_content === "string" && d.reasoning_content ? d.reasoning_content : d.reasoning;
  if (typeof thinking === "string" && thinking) yield { part: "thinking", text: thinking };
  if (typeof d.content === "string" && d.content) yield { part: "answer", text: d.content };
}

/**
 * The pieces of a chat completion stream, delta by delta, as its events arrive. An error event (the
 * gateway's, when the upstream broke off) ends it with that error. An event that is not JSON is
 * passed over: when an upstream breaks off mid-event, the gateway ends the half event and sends
 * its error event after it.
 * @param {ReadableStream<Uint8Array>} body
 * @returns {AsyncGenerator<Piece>}
 */
async function* streamedPieces(body) {
  const events = sseEvents();
  for await (const chunk of bodyText(body)) {
    for (const data of events.push(chunk)) {
      if (data === "" || data === "[DONE]") continue;
      const parsed = parseEvent(data);
      if (parsed === null) continue;
      if (parsed.error) throw new Error(errorMessage(parsed.error));
      const delta = parsed.choices?.[0]?.delta;
      if (delta) yield* pieces(delta);
    }
    // Thrown, the body is cancelled (bodyText's finally), as a reply cut at its most is.
    if (events.unfinishedLength() > EVENT_MAX_CHARS) throw tooLong("an event");
  }
}

/**
 * The text of an answer's body, chunk by chunk, as it comes. However the reading ends, the body is
 * cancelled, so that a reply given up on does not hold its backend until it would have ended.
 * @param {ReadableStream<Uint8Array>} body
 * @returns {AsyncGenerator<string>}
 */
async function* bodyText(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  try {
    for (;;) {
      const { done, value } = await reader.read().catch((e) => {
        throw lostConnection(e);
      });
      if (done) return;
      yield decoder.decode(value, { stream: true });
    }
  } finally {
    reader.cancel().catch(() => {});
  }
}

/**
 * A stream's error event's message: OpenAI's, vLLM's, SGLang's and llama.cpp's is `error.message`,
 * TGI's `error` itself (a string).
 * @param {unknown} error
 * @returns {string}
 */
function errorMessage(error) {
  if (typeof error === "string" && error !== "") return error;
  const message = typeof error === "object" && error !== null ? /** @type {{ message?: unknown }} */ (error).message : undefined;
  return typeof message === "string" && message !== "" ? message : "the stream failed";
}

/**
 * @param {string} data
 * @returns {{ error?: unknown, choices?: { delta?: Delta }[] } | null}
 */
function parseEvent(data) {
  try {
    return JSON.parse(data);
  } catch {
    return null;
  }
}
