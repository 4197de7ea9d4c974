import { describe, expect, it } from "vitest";
import { backendEvent, clientAsks, clientEventId, eventType, outputEvent, TYPE_WITHIN } from "../../src/realtime/event-type.ts";

describe("a realtime message's event type", () => {
  it("is the first type its head names, whether or not an event_id comes before it", () => {
    expect(eventType('{"type":"session.created","id":"sess-1","created":0}')).toBe("session.created");
    expect(eventType('{"event_id":"event_sim0-a_0", "type" : "response.created","response":{"type":"x"}}')).toBe("response.created");
    expect(eventType("hello")).toBeNull();
  });

  it("is not looked for between the head and the end: a message led by a long field, its type not last, is none", () => {
    expect(eventType(`{"audio":"${"A".repeat(TYPE_WITHIN)}","type":"input_audio_buffer.append","x":"${"A".repeat(TYPE_WITHIN)}"}`)).toBeNull();
  });

  it("is the type a message ends with, whatever its head names: an SDK's model serialised in field order puts it last (vLLM-Omni's full-duplex events)", () => {
    expect(eventType(`{"audio":"${"A".repeat(TYPE_WITHIN)}","type":"input_audio_buffer.append"}`)).toBe("input_audio_buffer.append");
    expect(eventType(typeLast("response.done", { response: { output: [{ type: "message" }], usage: { input_tokens: 10, output_tokens: 4 } } }))).toBe("response.done");
    // Python's json.dumps spaces, a pretty-printed end.
    expect(eventType('{"error": {"type": "invalid_request_error"}, "event_id": "e", "type": "error"}\n')).toBe("error");
    // A nested object's type at the message's end is not the message's.
    expect(eventType('{"type":"response.output_item.done","item":{"id":"i","type":"message"}}')).toBe("response.output_item.done");
    expect(eventType('{"event_id":"e","item":{"id":"i","type":"message"}}')).toBe("message");
    // Nor is a type quoted inside a string the message ends with.
    expect(eventType(JSON.stringify({ delta: "A".repeat(TYPE_WITHIN) + '"type":"response.done"}' }))).toBeNull();
  });
});

/** An event as the OpenAI SDK's pydantic models dump it: its fields in order, `type` last. */
const typeLast = (type: string, fields: Record<string, unknown>) => JSON.stringify({ event_id: "evt_1", ...fields, type });

describe("what a backend's message says of its engine", () => {
  it.each([
    ['{"type":"session.created","id":"sess-1","created":0}', "server"],
    ['{"event_id":"e1","type":"session.updated","session":{}}', "server"],
    ['{"type":"transcription_session.created"}', "server"],
    ['{"type":"input_audio_buffer.committed","item_id":"i1"}', "committed"],
    ['{"type":"conversation.created","conversation":{}}', "server"],
    ['{"type":"output_audio_buffer.started"}', "server"],
    ['{"type":"response.created","response":{"status_details":{"type":"error"}}}', "server"],
    ['{"type":"conversation.item.created","item":{}}', "server"],
    ['{"type":"error","error":"Invalid JSON","code":"invalid_json"}', "error"],
    ['{"type":"transcription.delta","delta":"hi"}', "engine"],
    ['{"type":"response.output_audio.delta","delta":"AAAA"}', "engine"],
    ["hello", "engine"],
  ] as const)("%s: %s", (message, kind) => {
    expect(backendEvent(message)).toBe(kind);
  });

  it.each([
    [typeLast("session.created", { session: { type: "realtime", audio: { input: { format: { type: "audio/pcm", rate: 24000 } } } } }), "server"],
    [typeLast("response.created", { response: { id: "r", object: "realtime.response", status: "in_progress" } }), "server"],
    [typeLast("input_audio_buffer.committed", { item_id: "i" }), "committed"],
    [typeLast("error", { error: { type: "invalid_request_error", code: "invalid_event", message: "m" } }), "error"],
    [JSON.stringify({ content_index: 0, delta: "A".repeat(2 * TYPE_WITHIN), event_id: "e", item_id: "i", output_index: 0, response_id: "r", type: "response.output_audio.delta" }), "engine"],
  ] as const)("its type last (vLLM-Omni's full-duplex events): %#, %s", (message, kind) => {
    expect(backendEvent(message)).toBe(kind);
  });

  it("binary audio is the engine's", () => {
    expect(backendEvent(new ArrayBuffer(8))).toBe("engine");
  });
});

describe("what a client's message asks its backend (a response, a commit: then owed)", () => {
  it.each([
    ['{"type":"response.create"}', "response"],
    ['{"event_id":"c1","type":"input_audio_buffer.commit"}', "commit"],
    ['{"type":"input_audio_buffer.commit","final":true}', "commit"],
    ['{"type":"input_audio_buffer.append","audio":"AAAA"}', null],
    ['{"type":"session.update","model":"m"}', null],
    ['{"type":"conversation.item.create","item":{"type":"message"}}', null],
  ] as const)("%s: %s", (message, asks) => {
    expect(clientAsks(message)).toBe(asks);
  });
});

describe("a client's message's event_id, read from its head or end (what is refused may be too large to parse)", () => {
  const audio = "A".repeat(10 * TYPE_WITHIN);
  it.each([
    ['{"event_id":"e1","type":"session.update"}', "e1"],
    [`{"type":"input_audio_buffer.append", "event_id" : "e2","audio":"${audio}"}`, "e2"],
    [`{"audio":"${audio}","type":"input_audio_buffer.append","event_id":"e3"}`, "e3"],
    // Not the outermost object's: a nested one's, or one quoted in a string.
    [`{"type":"session.update","session":{"event_id":"nested","x":"${audio}"}}`, null],
    [`{"type":"session.update","session":{"x":"${audio}","event_id":"nested"}}`, null],
    [`{"type":"session.update","note":"\\"event_id\\":\\"quoted\\"}"}`, null],
    [`{"type":"input_audio_buffer.append","audio":"${audio}"}`, null],
  ] as const)("case %#", (message, id) => {
    expect(clientEventId(message)).toBe(id);
  });
});

describe("what a backend's message is of its output, as its tokens are counted", () => {
  it.each([
    ["response.done", { of: "response", is: "done" }],
    ["response.output_audio_transcript.delta", { of: "response", is: "delta" }],
    ["response.function_call_arguments.delta", { of: "response", is: "delta" }],
    ["transcription.delta", { of: "transcription", is: "delta" }],
    ["transcription.done", { of: "transcription", is: "done" }],
    ["conversation.item.input_audio_transcription.delta", { of: "transcription", is: "delta" }],
    ["conversation.item.input_audio_transcription.completed", { of: "transcription", is: "done" }],
    ["conversation.item.input_audio_transcription.failed", { of: "transcription", is: "done" }],
    ["conversation.item.input_audio_transcription.segment", null],
    ["response.text.done", null],
    ["response.created", { of: "response", is: "start" }],
    ["transcription_session.updated", null],
    [null, null],
  ] as const)("%s: %o", (type, output) => {
    expect(outputEvent(type)).toEqual(output);
  });

  it("every output event is the engine's", () => {
    for (const type of ["response.done", "response.text.delta", "transcription.delta", "transcription.done", "conversation.item.input_audio_transcription.completed"]) {
      expect(backendEvent(JSON.stringify({ type }))).toBe("engine");
    }
  });
});
