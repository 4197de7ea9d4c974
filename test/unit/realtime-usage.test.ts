import { describe, expect, it } from "vitest";
import { RealtimeUsage } from "../../src/realtime/usage.ts";

/** `u` reported `prompt` and `completion` tokens, and a session its client leaves now is charged them alone. */
const expectReported = (u: RealtimeUsage, prompt: number, completion: number) => {
  const reported = { prompt, completion, cached: 0, cacheReported: false };
  expect([u.total, u.totalIfLeft]).toEqual([reported, reported]);
};

const done = (usage: unknown, extra: Record<string, unknown> = {}) => JSON.stringify({ type: "response.done", event_id: "e1", ...extra, response: { id: "r1", status: "completed", usage } });

describe("RealtimeUsage", () => {
  it("sums the usage of every response.done over a session, cached input tokens by either API's name", () => {
    const u = new RealtimeUsage();
    expect(u.total).toBeUndefined();
    u.take(done({ input_tokens: 100, output_tokens: 7, input_token_details: { cached_tokens: 64 } }));
    u.take(JSON.stringify({ type: "response.text.delta", delta: "hi" }));
    u.take(done({ input_tokens: 120, output_tokens: 5, input_tokens_details: { cached_tokens: 100 } }));
    expect(u.total).toEqual({ prompt: 220, completion: 12, cached: 164, cacheReported: false });
  });

  it("reads only a response.done: another event naming it in its text, a delta too long to search, or a broken message count nothing", () => {
    const u = new RealtimeUsage();
    u.take(JSON.stringify({ type: "response.text.delta", delta: '"response.done"', response: { usage: { output_tokens: 9 } } }));
    // An audio delta's base64 past the searched head, with the words inside it.
    u.take(JSON.stringify({ type: "response.audio.delta", delta: "A".repeat(1000) + '"response.done"', response: { usage: { output_tokens: 9 } } }));
    u.take('{"type":"response.done","response":{"usage":{"output_tokens":9}');
    expect(u.total).toBeUndefined();
    // The deltas they are: a response.done that reports nothing charges them, a token each, not the 9s in them.
    u.take(done(null));
    expect(u.total).toEqual({ prompt: 0, completion: 2, cached: 0, cacheReported: false });
  });

  it("counts no figure an engine could not have counted, and no more cached tokens than prompt tokens", () => {
    const u = new RealtimeUsage();
    u.take(done({ input_tokens: 1e308, output_tokens: -3, input_token_details: { cached_tokens: 2.5 } }));
    u.take(done({ input_tokens: 10, output_tokens: 4, input_token_details: { cached_tokens: 50 } }));
    expect(u.total).toEqual({ prompt: 10, completion: 4, cached: 10, cacheReported: false });
  });

  it("counts an output token for every delta of a response whose response.done did not come, for a session its client left", () => {
    const u = new RealtimeUsage();
    const delta = (type: string) => JSON.stringify({ event_id: "e", type, response_id: "r2", delta: "x" });
    u.take(delta("response.text.delta"));
    u.take(done({ input_tokens: 10, output_tokens: 4 }));
    // Reported: its deltas are in its usage.
    expect(u.totalIfLeft).toEqual({ prompt: 10, completion: 4, cached: 0, cacheReported: false });
    for (const type of ["response.text.delta", "response.output_text.delta", "response.audio.delta", "response.function_call_arguments.delta"]) u.take(delta(type));
    // Not deltas: the ends of parts, other events.
    for (const type of ["response.text.done", "response.created", "conversation.item.created"]) u.take(delta(type));
    expect(u.total).toEqual({ prompt: 10, completion: 4, cached: 0, cacheReported: false });
    expect(u.totalIfLeft).toEqual({ prompt: 10, completion: 8, cached: 0, cacheReported: false });
    // A response that ended is not one left; one whose response.done reported no usage (Speaches'
    // says null) is charged its deltas then, a token each, as one left is: no response is free.
    const w = new RealtimeUsage();
    for (let r = 0; r < 3; r++) {
      for (let i = 0; i < 10; i++) w.take(delta("response.text.delta"));
      expect(w.take(done(null))).toEqual({ prompt: 0, completion: 10 * (r + 1), cached: 0, cacheReported: false });
    }
    expectReported(w, 0, 30);
    // With nothing reported at all, the deltas alone.
    const v = new RealtimeUsage();
    v.take(delta("response.audio_transcript.delta"));
    expect([v.total, v.totalIfLeft]).toEqual([undefined, { prompt: 0, completion: 1, cached: 0, cacheReported: false }]);
  });

  it("sums a transcription's usage as a response's: vLLM's transcription.done and OpenAI's input transcription, beside the responses", () => {
    const u = new RealtimeUsage();
    u.take(JSON.stringify({ type: "transcription.delta", delta: "hel" }));
    u.take(JSON.stringify({ type: "transcription.done", text: "hello", usage: { prompt_tokens: 40, completion_tokens: 3, total_tokens: 43 } }));
    const completed = { event_id: "e", type: "conversation.item.input_audio_transcription.completed", item_id: "i", content_index: 0, transcript: "hi" };
    u.take(JSON.stringify({ ...completed, usage: { type: "tokens", input_tokens: 20, output_tokens: 2, total_tokens: 22, input_token_details: { text_tokens: 0, audio_tokens: 20 } } }));
    // Billed by its length: no tokens to count.
    u.take(JSON.stringify({ ...completed, usage: { type: "duration", seconds: 3 } }));
    u.take(done({ input_tokens: 10, output_tokens: 4 }));
    expectReported(u, 70, 9);
  });

  it("counts an output token for every transcription delta whose transcription did not end, apart from a response's that did", () => {
    const u = new RealtimeUsage();
    // vLLM: a client that leaves mid-transcription; vLLM stops it and reports nothing.
    for (let i = 0; i < 3; i++) u.take(JSON.stringify({ type: "transcription.delta", delta: "w" }));
    expect([u.total, u.totalIfLeft]).toEqual([undefined, { prompt: 0, completion: 3, cached: 0, cacheReported: false }]);
    // OpenAI transcribes the input audio while a response is made: the response's end does not end the transcription.
    const w = new RealtimeUsage();
    w.take(JSON.stringify({ event_id: "e", type: "conversation.item.input_audio_transcription.delta", item_id: "i", delta: "w" }));
    w.take(JSON.stringify({ type: "response.text.delta", delta: "x" }));
    w.take(done({ input_tokens: 10, output_tokens: 4 }));
    expect(w.totalIfLeft).toEqual({ prompt: 10, completion: 5, cached: 0, cacheReported: false });
    // A failed transcription ended too (its backend's doing): nothing left of it.
    w.take(JSON.stringify({ event_id: "e", type: "conversation.item.input_audio_transcription.failed", item_id: "i", error: {} }));
    expect(w.totalIfLeft).toEqual({ prompt: 10, completion: 4, cached: 0, cacheReported: false });
  });
  it("charges a transcription's audio deltas with its transcription, not as a response left: vLLM-Omni sends a response.audio.delta per audio chunk of a transcription, and no response.done", () => {
    const u = new RealtimeUsage();
    // vLLM-Omni's realtime transcription (realtime_connection.py): within one generation, the text's deltas and each audio chunk's, its usage in transcription.done, then response.audio.done.
    for (let i = 0; i < 3; i++) {
      u.take(JSON.stringify({ type: "transcription.delta", delta: "w" }));
      u.take(JSON.stringify({ type: "response.audio.delta", audio: "AAAA", format: "pcm16", sample_rate_hz: 24000 }));
    }
    u.take(JSON.stringify({ type: "transcription.done", text: "www", usage: { prompt_tokens: 40, completion_tokens: 3, total_tokens: 43 } }));
    u.take(JSON.stringify({ type: "response.audio.done", has_audio: true }));
    expect(u.total).toEqual({ prompt: 40, completion: 3, cached: 0, cacheReported: false });
    // The client closes, the session's normal end: charged what was reported, once.
    expect(u.totalIfLeft).toEqual(u.total);
    // Audio of a transcription cut short is charged as its text is: a token a delta.
    for (let i = 0; i < 2; i++) u.take(JSON.stringify({ type: "response.audio.delta", audio: "AAAA", format: "pcm16", sample_rate_hz: 24000 }));
    expect(u.totalIfLeft).toEqual({ prompt: 40, completion: 5, cached: 0, cacheReported: false });
  });

  it("counts a response's deltas with its response while one is open (from response.created to its response.done), whatever ends beside it", () => {
    const u = new RealtimeUsage();
    u.take(JSON.stringify({ type: "response.created", response: { id: "r1", status: "in_progress" } }));
    u.take(JSON.stringify({ type: "response.audio.delta", response_id: "r1", delta: "AAAA" }));
    // OpenAI's transcription of the input audio ends while the response goes on: the response's delta is still one left.
    u.take(JSON.stringify({ type: "conversation.item.input_audio_transcription.completed", item_id: "i", transcript: "hi", usage: { type: "tokens", input_tokens: 20, output_tokens: 2, total_tokens: 22 } }));
    expect(u.totalIfLeft).toEqual({ prompt: 20, completion: 3, cached: 0, cacheReported: false });
    u.take(done({ input_tokens: 10, output_tokens: 4 }));
    expectReported(u, 30, 6);
  });
  it("reads an output's end whose type comes last, as vLLM-Omni's full-duplex server serialises the OpenAI SDK's models (ResponseDoneEvent: event_id, response, type)", () => {
    const u = new RealtimeUsage();
    const sdk = (type: string, fields: Record<string, unknown>) => JSON.stringify({ event_id: "evt_1", ...fields, type });
    u.take(sdk("response.created", { response: { id: "r1", object: "realtime.response", output: [], status: "in_progress" } }));
    // Its audio deltas, led by their base64 (content_index, delta, event_id, …, type).
    for (let i = 0; i < 3; i++) u.take(JSON.stringify({ content_index: 0, delta: "A".repeat(1000), event_id: "e", item_id: "i", output_index: 0, response_id: "r1", type: "response.output_audio.delta" }));
    expect(u.totalIfLeft).toEqual({ prompt: 0, completion: 3, cached: 0, cacheReported: false });
    const response = { audio: { output: { format: { rate: 24000, type: "audio/pcm" } } }, id: "r1", object: "realtime.response", output: [{ id: "i", content: [{ transcript: "hi", type: "output_audio" }], role: "assistant", type: "message" }], status: "completed" };
    u.take(sdk("response.done", { response: { ...response, usage: { input_tokens: 10, output_tokens: 4, total_tokens: 14 } } }));
    expectReported(u, 10, 4);
  });
  it("charges a response whose end reports no output tokens (no usage field, null, or zeros) its own deltas, those sent while none was announced with them, and nothing when it sent none", () => {
    const u = new RealtimeUsage();
    const text = JSON.stringify({ type: "response.text.delta", delta: "x" });
    const created = JSON.stringify({ type: "response.created", response: { id: "r1", status: "in_progress" } });
    // No usage field at all, after a response.created.
    u.take(created);
    for (let i = 0; i < 4; i++) u.take(text);
    u.take(JSON.stringify({ type: "response.done", response: { id: "r1", status: "completed" } }));
    expectReported(u, 0, 4);
    // Its input counted, its output not: the output is its deltas.
    u.take(created);
    for (let i = 0; i < 2; i++) u.take(text);
    u.take(done({ input_tokens: 7, output_tokens: 0 }));
    expectReported(u, 7, 6);
    // A backend that announces no response: its deltas are the response.done's all the same.
    for (let i = 0; i < 3; i++) u.take(text);
    u.take(done(null));
    expectReported(u, 7, 9);
    // One that sent nothing is charged nothing; one its backend failed, only what it reported.
    expect(u.take(done(null))).toBeNull();
    for (let i = 0; i < 3; i++) u.take(text);
    u.take(JSON.stringify({ type: "response.done", response: { id: "r2", status: "failed", usage: null } }));
    expectReported(u, 7, 9);
  });

  it("spares a response its backend broke off with a server_error and no response.done (Speaches' answer to its LLM's failure) its deltas, as a failed response.done's: the next response's end claims none of them; another error leaves the response going", () => {
    const u = new RealtimeUsage();
    const text = JSON.stringify({ type: "response.text.delta", delta: "x" });
    const created = JSON.stringify({ type: "response.created", response: { id: "r1", status: "in_progress" } });
    // Speaches' ErrorEvent, serialised in its fields' order: its type last.
    const serverError = JSON.stringify({ error: { code: null, message: "APIConnectionError: Connection error.", param: null, type: "server_error" }, event_id: "e9", type: "error" });
    u.take(created);
    for (let i = 0; i < 3; i++) u.take(text);
    expect(u.take(serverError)).toBeNull();
    expect([u.total, u.totalIfLeft]).toEqual([undefined, undefined]);
    u.take(created);
    for (let i = 0; i < 2; i++) u.take(text);
    u.take(done(null));
    expectReported(u, 0, 2);
    // A client event refused while a response is made: the response goes on, all its deltas its own.
    u.take(created);
    u.take(text);
    u.take(JSON.stringify({ type: "error", event_id: "e10", error: { type: "invalid_request_error", message: "Specifying `session.input_audio_format` is not supported." } }));
    u.take(text);
    u.take(done(null));
    expectReported(u, 0, 4);
    // A server_error while no response is made ends none; a broken one is not read.
    u.take(serverError);
    u.take("{\"type\":\"error\",");
    u.take(created);
    u.take(text);
    expect(u.totalIfLeft).toEqual({ prompt: 0, completion: 5, cached: 0, cacheReported: false });
  });

  it("charges a transcription whose end reports no output tokens a token for each of its deltas, as one left: an early vLLM's transcription.done reported zeros (a TODO), whisper-1's a duration", () => {
    const u = new RealtimeUsage();
    const zeros = JSON.stringify({ type: "transcription.done", text: "www", usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } });
    for (let i = 0; i < 3; i++) u.take(JSON.stringify({ type: "transcription.delta", delta: "w" }));
    u.take(zeros);
    expectReported(u, 0, 3);
    // A transcription of silence: no deltas, nothing to charge.
    u.take(zeros);
    // One that reports its tokens is charged them, however many deltas it sent.
    for (let i = 0; i < 3; i++) u.take(JSON.stringify({ type: "transcription.delta", delta: "w" }));
    u.take(JSON.stringify({ type: "transcription.done", text: "www", usage: { prompt_tokens: 40, completion_tokens: 2, total_tokens: 42 } }));
    // vLLM-Omni's audio chunks are not its text's tokens: its zeros are floored by its text deltas alone.
    u.take(JSON.stringify({ type: "transcription.delta", delta: "w" }));
    for (let i = 0; i < 5; i++) u.take(JSON.stringify({ type: "response.audio.delta", audio: "AAAA", format: "pcm16", sample_rate_hz: 24000 }));
    u.take(zeros);
    expectReported(u, 40, 6);
    // Billed by its length: its deltas are charged; with none (its text in its end alone), it is free.
    const completed = { type: "conversation.item.input_audio_transcription.completed", item_id: "i", transcript: "hi", usage: { type: "duration", seconds: 3 } };
    u.take(JSON.stringify({ type: "conversation.item.input_audio_transcription.delta", item_id: "i", delta: "hi" }));
    u.take(JSON.stringify(completed));
    expectReported(u, 40, 7);
    expect(u.take(JSON.stringify(completed))).toBeNull();
    expectReported(u, 40, 7);
  });
});
