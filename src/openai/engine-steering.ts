import { badRequest, type GatewayError } from "./errors.ts";

/**
 * Request fields that make an engine connect somewhere: vLLM's `kv_transfer_params` (disaggregated
 * prefill/decode: the remote engine, host and port a decode engine pulls its KV cache from, or a
 * prefill engine pushes it to) and `ec_transfer_params` (its encoder-cache twin: where a
 * multimodal input's encoder output is pulled from, per item) and SGLang's `bootstrap_host`, `bootstrap_port`, `bootstrap_room`
 * (the prefill server a decode server joins). They are the deployment's to set: from a tenant they
 * would point the fleet's engines at an address of the tenant's choosing (its own server, to be
 * sent another request's KV cache; a host of the private network), or at another request's room.
 * The gateway itself sets none of them.
 */
const TRANSFER = "it steers an engine's KV- or encoder-cache transfer (disaggregated serving), which is the deployment's to set, not a client's";

/**
 * vLLM's `request_id` (chat, completions, responses): the engine tracks a request by it, and its
 * Responses API stores the answer (and its conversation) under it as the response's id, without
 * looking whether one is stored there: a tenant naming another's response id would overwrite that
 * conversation, and the other's next turn would go on from what the tenant planted. Each request
 * has the gateway's own id (`x-request-id`).
 */
const IDENTITY = "the engine tracks requests and stores responses by it (one naming another's would take its place); each request has the gateway's own id, in x-request-id";

/**
 * SGLang's `rid` (chat, completions, embeddings; a string, or one per prompt): the engine's own
 * request id, and the answer's `id`. SGLang refuses a request whose rid is live ("Duplicate request
 * ID detected"), and aborts by rid prefix — its scheduler drops every queued or running request
 * whose rid starts with the one aborted, as it does when a client leaves. From a tenant, a rid
 * another tenant's client sends, taken first, has that client refused; a short rid, then a
 * dropped connection, aborts every request whose rid starts with it (the rids SGLang makes are
 * `chatcmpl-` and a UUID, or a bare hex UUID, by version: `chatcmpl-`, or `a`, reaches many).
 */
const SGLANG_IDENTITY = "the engine tracks requests by it and aborts every request whose id starts with it (one naming another's would refuse or abort that request); each request has the gateway's own id, in x-request-id";

/**
 * Code the engine runs that the request names: SGLang's `custom_logit_processor` is a serialized
 * Python callable (dill's bytes, as hex) its scheduler deserializes and calls on the logits, when
 * started with `--enable-custom-logit-processor`: from a tenant, code of its choosing on the GPU
 * host. vLLM's `logits_processors` (up to 0.10) names a class the engine imports and builds with
 * the request's arguments, any its `--logits-processor-pattern` admits. The deployment chooses what
 * runs on its engines; its master key may still send them.
 */
const CODE = "the engine runs the code it names (SGLang deserializes and calls a custom_logit_processor; vLLM imports the logits_processors class), and which code runs on the engines is the deployment's to choose";

/**
 * vLLM's `vllm_xargs`: the engine takes them as the request's `extra_args`, the very dict its KV
 * connectors read `kv_transfer_params` from (the field refused above by name is put there too),
 * and which the deployment's own logits processors and plugins read their settings from.
 */
const EXTENSION_ARGS = "the engine takes them as its extra_args, where its KV connectors read kv_transfer_params and the deployment's own extensions their settings, which are the deployment's to set";

/**
 * SGLang's sessions: a request naming `session_params.id` goes on from the conversation the engine
 * stored under that id (its tokens, another's prompt and answer, ahead of the request's own; `replace`
 * and `offset` rewrite it), and `session_id` (with `--enable-session-radix-cache`) holds the KV
 * cache a session references ahead of everyone else's until it is closed. Sessions are opened and
 * closed on the engine's own endpoints (`/open_session`, `/close_session`), which the gateway does
 * not serve, and live on one engine, where the gateway routes each request on its own. vLLM's
 * `session_id` is a label its scheduler and connectors may read, and the same field.
 */
const SESSION = "the engine keeps a session's conversation and KV cache under it (one naming another's would go on from, or change, that session), and sessions are opened and closed on the engine's own endpoints, which the gateway does not serve";

/**
 * The Responses API's `previous_response_id`, on an engine that stores responses (vLLM with
 * VLLM_ENABLE_RESPONSES_API_STORE=1, SGLang by default): the engine builds the prompt from the
 * conversation stored under that id, another's prompt and answer too, ahead of the request's own
 * input, so a tenant naming another's response id (from a log, a shared tool, a support ticket)
 * reads that conversation back. It is SGLang's sessions' read, by the Responses API, and the mirror
 * of `request_id`'s write. The gateway keeps no record of which key a response was answered to, nor
 * of which backend stored it: the whole conversation, sent again, is served as well (routed where
 * its prefix is cached).
 */
const STORED_RESPONSE = "the engine goes on from the conversation it stored under that id, whoever's it is (one naming another's would read that conversation back); send the whole conversation instead, which the gateway routes where its prefix is cached";

/**
 * SGLang's `routed_dp_rank` (and `data_parallel_rank`, its old name): its data-parallel controller
 * sends the request straight to that rank's scheduler, past its load balancing, and without looking
 * whether the rank is one it has; `disagg_prefill_dp_rank` tells a decode engine which prefill rank
 * holds the request's KV cache. Placement is the router's, the deployment's.
 */
const PLACEMENT = "it places the request on one of the engine's data-parallel ranks past its load balancing, which is the deployment's router's to choose";

/**
 * SGLang's `lora_path`: the LoRA adapter, of those loaded on the engine, that serves the request.
 * The deployment names its adapter in its `model` (`base:adapter`); a key kept to one model by its
 * `models` would otherwise reach every adapter the engine holds, another tenant's fine-tune too.
 */
const ADAPTER = "it picks which of the LoRA adapters loaded on the engine serves the request, which the deployment's model names (a key kept to one model would reach them all)";

/**
 * vLLM's `media_io_kwargs` (how a video or image is decoded) and `mm_processor_kwargs` (the model's
 * processor: an image's pixels, a video's frames per second) override what the engine was started
 * with, and those settings bound the host memory and GPU work one request costs: a request's
 * `{"video": {"num_frames": -1}}` decodes every frame of a video, past the engine's ceiling
 * (CVE-2026-34755, GHSA-vxqj-p4gw-9h4c). SGLang's alike: `max_dynamic_patch` (and
 * `min_dynamic_patch`, the fewest) is how many tiles an image is cut into, each some 256 tokens
 * for the vision encoder and the prompt (InternVL-style models start with 12; a content part's
 * `image_url` or `video_url` may carry its own), and `images_config` an OCR processor's sizes.
 */
const MEDIA_PROCESSING = "it overrides the engine's media decoding or processor settings (vLLM: a video's frame count, -1 for every frame; SGLang: an image's tile count), which bound what one request may cost the engine and are the deployment's to set";

/**
 * Tensors the engine deserializes: vLLM's `prompt_embeds` (completions, with
 * `--enable-prompt-embeds`) and a content part's `image_embeds`, `audio_embeds` or `video_embeds`
 * (with `--enable-mm-embeds`) are base64 of `torch.save`, which it `torch.load`s and densifies. A
 * crafted sparse tensor wrote out of bounds there (CVE-2025-62164, GHSA-mrw7-hf4f-83pf, 0.10.2 to
 * 0.11.0); one of a few KiB that declares a (2^20, 2^20) shape densifies to 4 TiB, until the engine
 * bounds it; PyTorch's own `weights_only` unpickler corrupted memory before 2.10 (CVE-2026-24747).
 * And what the engine serves then is no prompt the gateway read: routed on nothing, estimated as
 * nothing, past the configured counts.
 */
const TENSOR = "the engine deserializes it (torch.load: a crafted tensor corrupts or exhausts the engine's memory, CVE-2025-62164) and serves a prompt the gateway never read, routed and estimated as none";

/**
 * SGLang's chat `input_ids`: the engine serves those tokens and skips its chat template, the
 * messages then read only for stop strings and a tool call's grammar (their images not at all). The
 * gateway routed and fingerprinted the messages, so its shared prefix table learns, of the backend
 * it chose, blocks that backend never cached (and what the engine then reports cached is set
 * against them): every key's routing reads that table. A completions prompt of token ids is
 * OpenAI's own, and routed on the ids the engine serves.
 */
const TOKENS_IN_PLACE = "the engine serves these tokens in place of the messages, which are what the gateway routed, fingerprinted and counted (the prefix table every key's routing reads would learn blocks no backend holds)";

/**
 * A Jinja chat template from the request, which the engine renders in place of the model's own:
 * vLLM's `chat_template` (chat, Responses), rendered up to 0.10 as sent and from 0.11 only with
 * `--trust-request-chat-template` (CVE-2025-61620), though its Rust frontend renders it regardless;
 * and a `chat_template` key inside `chat_template_kwargs`, which SGLang hands to the tokenizer's
 * `apply_chat_template` as its template (and vLLM's Responses API did, past that gate). The
 * renderer is sandboxed, not bounded: three nested `range`s, a 116-byte body, held a thread of
 * vLLM's frontend for 55 seconds (vllm#52025), the requests behind it waiting. The template's own switches
 * (`enable_thinking`) are read off `chat_template_kwargs` and pass.
 */
const TEMPLATE = "the engine renders it in place of the model's chat template, and its Jinja renderer bounds no work (a hundred bytes of nested loops hold the engine's frontend for seconds to minutes)";

/**
 * A realtime handshake's query `session_id`: vLLM-Omni's full-duplex `/v1/realtime` (a server
 * that runs its duplex handler takes it unless the query's `duplex` says otherwise) opens its
 * session under the id the query names (experimental/fullduplex/openai/realtime_state.py,
 * from_query_params), and its registry refuses to open a second session under a live one's id
 * ("Duplex session already exists": protocol.py, DuplexSessionRegistry.create). From a tenant, an
 * id another tenant's client names, taken first, has that client's session refused. The query is
 * passed on (realtime-handshake.ts), so it is held to what a body is. vLLM's own realtime endpoint
 * and SGLang's read no query string.
 */
const REALTIME_SESSION = "the engine opens the realtime session under it (vLLM-Omni), and refuses a second session under a live one's id (one naming another's would take it first); each session has the gateway's own id, in x-request-id";

/**
 * A realtime handshake's query `autostart` or `resume`: vLLM-Omni's full-duplex `/v1/realtime`
 * opens each session itself, under an id of its own, when its query names a model (always so
 * through the gateway: realtime-handshake.ts), unless `resume` is true or `autostart` false
 * (vllm_omni/experimental/fullduplex/openai/: realtime_state.py, RealtimeSessionState.from_query_params sets `_resume_only`;
 * realtime_session.py, NativeRealtimeSessionProtocol.receive_internal_event_text autostarts only
 * without it). Then the client's first event opens the session: a `session.update` under the
 * `session_id` or `id` its session names (realtime_input.py, _to_duplex_event and
 * _session_create_from_realtime), a `session.resume` attaching to a live session by id
 * (serving.py, OmniDuplexSessionHandler._open_session and _resume_session_handshake) — the id
 * another tenant's client names, as a query `session_id` would.
 */
const REALTIME_AUTOSTART = "it turns off the engine's own opening of the realtime session (vLLM-Omni), which then opens it under the id the client's first event names (one naming another's would take it first)";

/**
 * A realtime client event naming an engine session, from a virtual key: a `session.update`'s
 * `session_id` or `id` (in its `session`, which vLLM-Omni reads in place of the event when it is
 * an object, or at its top level: realtime_input.py, _to_duplex_event), under which vLLM-Omni
 * opens a session not yet open (_session_create_from_realtime), and a `session.resume`, which
 * attaches the connection to a live session by its id, incarnation and resume token
 * (serving.py, OmniDuplexSessionHandler._resume_session_handshake) and answers an unknown id
 * (`session_resume_expired`) apart from a live one whose token is wrong (`invalid_resume_token`).
 */
const REALTIME_EVENT_SESSION = "the engine opens or attaches the realtime session under it (vLLM-Omni), and refuses a second session under a live one's id (one naming another's would take it first)";
const REALTIME_RESUME = "it attaches this connection to a live realtime session by its id (vLLM-Omni), and tells a live id from an unknown one; a virtual key's session is opened by the engine, under an id of its own";

/**
 * Where a field sits: a top-level field's name, or a field inside an object (`holder.field`); one
 * in a chat message's content part is named from the part (`image_url.max_dynamic_patch`).
 */
type Refused = readonly (readonly [path: readonly string[], why: string])[];

const refused = (why: string, ...paths: string[]): Refused => paths.map((p) => [p.split("."), why] as const);

/**
 * A table by its fields' first names: a body is read by its own keys (a handful), each looked up
 * here, rather than by the table's thirty names each looked up in the body (a lookup that misses
 * costs as much as one that finds).
 */
function byFirstName(table: Refused): ReadonlyMap<string, Refused> {
  const m = new Map<string, (readonly [readonly string[], string])[]>();
  for (const entry of table) {
    const first = entry[0][0] as string;
    m.set(first, [...(m.get(first) ?? []), entry]);
  }
  return m;
}

/** Each field a virtual key may not set, with why. */
const REFUSED: Refused = [
  ...refused(TRANSFER, "kv_transfer_params", "ec_transfer_params", "bootstrap_host", "bootstrap_port", "bootstrap_room"),
  ...refused(IDENTITY, "request_id"),
  ...refused(SGLANG_IDENTITY, "rid"),
  ...refused(CODE, "custom_logit_processor", "logits_processors"),
  ...refused(EXTENSION_ARGS, "vllm_xargs"),
  ...refused(SESSION, "session_params", "session_id"),
  ...refused(STORED_RESPONSE, "previous_response_id"),
  ...refused(PLACEMENT, "routed_dp_rank", "data_parallel_rank", "disagg_prefill_dp_rank"),
  ...refused(ADAPTER, "lora_path"),
  ...refused(MEDIA_PROCESSING, "media_io_kwargs", "mm_processor_kwargs", "max_dynamic_patch", "min_dynamic_patch", "images_config"),
  ...refused(TENSOR, "prompt_embeds"),
  ...refused(TOKENS_IN_PLACE, "input_ids"),
  ...refused(TEMPLATE, "chat_template", "chat_template_kwargs.chat_template"),
];

/** Each field of a chat message's content part a virtual key may not set, with why. */
const REFUSED_IN_PART: Refused = [
  ...refused(TENSOR, "image_embeds", "audio_embeds", "video_embeds"),
  ...refused(MEDIA_PROCESSING, "image_url.max_dynamic_patch", "video_url.max_dynamic_patch"),
];

/** Each realtime handshake query parameter a virtual key may not set, with why. */
const REFUSED_IN_QUERY: ReadonlyMap<string, string> = new Map([
  ["session_id", REALTIME_SESSION],
  ["autostart", REALTIME_AUTOSTART],
  ["resume", REALTIME_AUTOSTART],
]);

const REFUSED_BY_NAME = byFirstName(REFUSED);
const REFUSED_IN_PART_BY_NAME = byFirstName(REFUSED_IN_PART);

/**
 * The 400 for a body whose top-level fields steer an engine, or null. Read off the parsed body, by
 * its own keys (byFirstName): a body without them costs nothing more, and none is re-serialised. Null is a
 * field left unset (as the engines read it), not a value. A content part's fields are read by the
 * one walk over a body's parts (content-parts.ts, with partSteering).
 */
export function engineSteeringRefusal(body: Readonly<Record<string, unknown>>): GatewayError | null {
  const found = fieldFound(body, REFUSED_BY_NAME);
  return found && steeringRefusal(found.path, found.why);
}

/** The first field of a content part a virtual key may not set: its path below the part (`.image_url.max_dynamic_patch`), and why. */
export function partSteering(part: Readonly<Record<string, unknown>>): { path: string; why: string } | null {
  const found = fieldFound(part, REFUSED_IN_PART_BY_NAME);
  return found && { path: `.${found.path}`, why: found.why };
}

/**
 * The 400 for a realtime handshake whose query names what steers an engine, or null: read by the
 * query's own names, decoded as a server's parser decodes them (`session%5Fid` is `session_id`).
 * A name present is refused whatever its value, as the query is passed on as it came.
 */
export function querySteeringRefusal(query: URLSearchParams): GatewayError | null {
  for (const name of query.keys()) {
    const why = REFUSED_IN_QUERY.get(name);
    if (why !== undefined) return steeringRefusal(name, why);
  }
  return null;
}

/**
 * The refusal of a realtime client event, parsed, that names an engine session from a virtual key
 * (REALTIME_EVENT_SESSION), or null: a `session.resume`, whatever it holds (`param` its `type`),
 * or a `session.update` holding `session_id` or `id` in its `session` or at its top level,
 * whatever its value.
 */
export function realtimeEventSteering(event: Readonly<Record<string, unknown>>): GatewayError | null {
  if (event.type === "session.resume") return badRequest(`a session.resume event is not accepted from a virtual key: ${REALTIME_RESUME}`, "type", "unsupported_parameter");
  if (event.type !== "session.update") return null;
  const session = event.session;
  const inSession = isObject(session) ? SESSION_IDS.find((name) => name in session) : undefined;
  if (inSession !== undefined) return steeringRefusal(`session.${inSession}`, REALTIME_EVENT_SESSION);
  const atTop = SESSION_IDS.find((name) => name in event);
  return atTop === undefined ? null : steeringRefusal(atTop, REALTIME_EVENT_SESSION);
}

/** The names vLLM-Omni opens a session under, the first that holds a value (realtime_input.py, _session_create_from_realtime). */
const SESSION_IDS = ["session_id", "id"] as const;

export function steeringRefusal(param: string, why: string): GatewayError {
  return badRequest(`${param} is not accepted from a virtual key: ${why}`, param, "unsupported_parameter");
}

function fieldFound(holder: Readonly<Record<string, unknown>>, table: ReadonlyMap<string, Refused>): { path: string; why: string } | null {
  for (const name in holder) {
    for (const [path, why] of table.get(name) ?? NONE) {
      let v: unknown = holder;
      for (const key of path) v = isObject(v) ? v[key] : undefined;
      if (v !== undefined && v !== null) return { path: path.join("."), why };
    }
  }
  return null;
}

const NONE: Refused = [];

function isObject(v: unknown): v is Readonly<Record<string, unknown>> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
