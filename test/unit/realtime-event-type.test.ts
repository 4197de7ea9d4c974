import { describe, expect, it } from "vitest";
import { asksForResponse, eventType, isSetupEvent, TYPE_WITHIN } from "../../src/realtime/event-type.ts";

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

describe("a backend's setup event (sent by its server without asking the engine)", () => {
  it.each([
    ['{"type":"session.created","id":"sess-1","created":0}', true],
    ['{"event_id":"e1","type":"session.updated","session":{}}', true],
    ['{"type":"transcription_session.created"}', true],
    ['{"type":"error","error":"Invalid JSON","code":"invalid_json"}', true],
    ['{"type":"transcription.delta","delta":"hi"}', false],
    ['{"type":"response.created","response":{"status_details":{"type":"error"}}}', false],
    ["hello", false],
  ] as const)("%s: %s", (message, setup) => {
    expect(isSetupEvent(message)).toBe(setup);
  });
});

describe("a client's message that asks for a response (its backend then owes one)", () => {
  it.each([
    ['{"type":"response.create"}', true],
    ['{"event_id":"c1","type":"input_audio_buffer.commit"}', true],
    ['{"type":"input_audio_buffer.commit","final":true}', true],
    ['{"type":"input_audio_buffer.append","audio":"AAAA"}', false],
    ['{"type":"session.update","model":"m"}', false],
    ['{"type":"conversation.item.create","item":{"type":"message"}}', false],
  ] as const)("%s: %s", (message, asks) => {
    expect(asksForResponse(message)).toBe(asks);
  });
});
