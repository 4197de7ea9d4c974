import { describe, expect, it } from "vitest";
import { backendEvent, clientAsks, eventType, TYPE_WITHIN } from "../../src/realtime/event-type.ts";

describe("a realtime message's event type", () => {
  it("is the first type its head names, whether or not an event_id comes before it", () => {
    expect(eventType('{"type":"session.created","id":"sess-1","created":0}')).toBe("session.created");
    expect(eventType('{"event_id":"event_sim0-a_0", "type" : "response.created","response":{"type":"x"}}')).toBe("response.created");
    expect(eventType("hello")).toBeNull();
  });

  it("is not looked for past the head: a message led by a long field is none", () => {
    expect(eventType(`{"audio":"${"A".repeat(TYPE_WITHIN)}","type":"input_audio_buffer.append"}`)).toBeNull();
  });
});

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
