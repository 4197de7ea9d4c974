import { describe, expect, it } from "vitest";
import { announcedModels, engineSessionRefusal, NONE_ANNOUNCED, pinSessionModel, sessionIntent, type AnnouncedModels, type SessionIntent, type SessionPins } from "../../src/realtime/session-model.ts";

const MODEL = "meta-llama/Llama-3.1-8B";
/** `message` as it reaches the backend from the master key ("owner") or a virtual key (key()). */
const pin = (message: string, pins: SessionPins = "owner") => pinSessionModel(message, MODEL, pins);
/** A virtual key's pins in a session of `intent` whose server announced `announced` (by default, nothing yet). */
const key = (intent: SessionIntent, announced: AnnouncedModels = NONE_ANNOUNCED): SessionPins => ({ intent, announced });
/** What Speaches' session.created announces in a conversation: its default whisper and TTS models. */
const SPEACHES: AnnouncedModels = { transcription: "Systran/faster-distil-whisper-small.en", speech: "speaches-ai/Kokoro-82M-v1.0-ONNX" };

describe("a client's session.update on its way to the backend", () => {
  it("names the deployment's model at its top level (vLLM's), and in its session when that names one (OpenAI's layout)", () => {
    expect(JSON.parse(pin('{"type":"session.update","model":"llama-3.1-8b"}') ?? "")).toEqual({ type: "session.update", model: "meta-llama/Llama-3.1-8B" });
    expect(JSON.parse(pin('{"event_id":"e1","type":"session.update","session":{"model":"other","voice":"alloy"}}') ?? "")).toEqual({
      event_id: "e1",
      type: "session.update",
      model: "meta-llama/Llama-3.1-8B",
      session: { model: "meta-llama/Llama-3.1-8B", voice: "alloy" },
    });
    // A session that names no model is left so.
    expect(JSON.parse(pin('{"type":"session.update","session":{"voice":"alloy"}}') ?? "")).toEqual({ type: "session.update", model: "meta-llama/Llama-3.1-8B", session: { voice: "alloy" } });
  });

  it("is found as the backend's JSON parser reads it: its type named twice (the last counts), or spelt with escapes", () => {
    expect(JSON.parse(pin(`{"type":"input_audio_buffer.append","model":"other","pad":"${"x".repeat(500)}","type":"session.update","z":1}`) ?? "")).toMatchObject({ type: "session.update", model: "meta-llama/Llama-3.1-8B" });
    expect(JSON.parse(pin('{"type":"\\u0073ession.update","model":"other"}') ?? "")).toMatchObject({ type: "session.update", model: "meta-llama/Llama-3.1-8B" });
  });

  it("names it for a virtual key's transcription in a transcription session, where its session names one (OpenAI's beta and GA layouts), and drops its speech model; a transcription_session.update as a session.update; the master key's pass", () => {
    const beta = '{"type":"session.update","session":{"input_audio_transcription":{"model":"whisper-1","language":"en"},"speech_model":"tts-1"}}';
    expect(JSON.parse(pin(beta, key("transcription")) ?? "")).toEqual({ type: "session.update", model: MODEL, session: { input_audio_transcription: { model: MODEL, language: "en" } } });
    expect(JSON.parse(pin(beta) ?? "")).toEqual({ type: "session.update", model: MODEL, session: { input_audio_transcription: { model: "whisper-1", language: "en" }, speech_model: "tts-1" } });
    const ga = '{"type":"session.update","session":{"type":"transcription","audio":{"input":{"transcription":{"model":"gpt-4o-transcribe"},"format":{"type":"audio/pcm"}}}}}';
    expect(JSON.parse(pin(ga, key("transcription")) ?? "")).toEqual({ type: "session.update", model: MODEL, session: { type: "transcription", audio: { input: { transcription: { model: MODEL }, format: { type: "audio/pcm" } } } } });
    const transcriptionSession = '{"type":"transcription_session.update","session":{"model":"other","input_audio_transcription":{"model":"other"}}}';
    expect(JSON.parse(pin(transcriptionSession, key("transcription")) ?? "")).toEqual({ type: "transcription_session.update", model: MODEL, session: { model: MODEL, input_audio_transcription: { model: MODEL } } });
    expect(JSON.parse(pin(transcriptionSession) ?? "")).toEqual({ type: "transcription_session.update", model: MODEL, session: { model: MODEL, input_audio_transcription: { model: "other" } } });
  });

  it("never names the deployment's model for a virtual key's transcription or speech in a conversation (it is the LLM there): the models its session names for them are dropped, its transcription object kept", () => {
    const beta = '{"type":"session.update","session":{"model":"other","input_audio_transcription":{"model":"Systran/faster-distil-whisper-small.en","language":"en"},"speech_model":"other-tts","voice":"af_heart"}}';
    expect(JSON.parse(pin(beta, key("conversation")) ?? "")).toEqual({ type: "session.update", model: MODEL, session: { model: MODEL, input_audio_transcription: { language: "en" }, voice: "af_heart" } });
    // Transcription turned on as OpenAI's clients do: still on, with the server's model.
    expect(JSON.parse(pin('{"type":"session.update","session":{"input_audio_transcription":{"model":"whisper-1"}}}', key("conversation")) ?? "")).toEqual({ type: "session.update", model: MODEL, session: { input_audio_transcription: {} } });
    const ga = '{"type":"session.update","session":{"type":"realtime","audio":{"input":{"transcription":{"model":"gpt-4o-transcribe","prompt":"p"}}}}}';
    expect(JSON.parse(pin(ga, key("conversation")) ?? "")).toEqual({ type: "session.update", model: MODEL, session: { type: "realtime", audio: { input: { transcription: { prompt: "p" } } } } });
  });

  it("names, for a virtual key's transcription and speech in a conversation, the models its server announced (OpenAI's beta and GA layouts, Speaches' speech_model): a session sent back as it was given passes unchanged", () => {
    const conversation = key("conversation", SPEACHES);
    const given = { model: MODEL, input_audio_transcription: { model: SPEACHES.transcription, language: null }, speech_model: SPEACHES.speech, voice: "af_heart" };
    const sentBack = { type: "session.update", session: given };
    expect(JSON.parse(pin(JSON.stringify(sentBack), conversation) ?? "")).toEqual({ ...sentBack, model: MODEL });
    const other = '{"type":"session.update","session":{"input_audio_transcription":{"model":"Systran/faster-whisper-large-v3","language":"en"},"speech_model":"other-tts"}}';
    expect(JSON.parse(pin(other, conversation) ?? "")).toEqual({ type: "session.update", model: MODEL, session: { input_audio_transcription: { model: SPEACHES.transcription, language: "en" }, speech_model: SPEACHES.speech } });
    const ga = '{"type":"session.update","session":{"type":"realtime","audio":{"input":{"transcription":{"model":"gpt-4o-transcribe","prompt":"p"}}}}}';
    expect(JSON.parse(pin(ga, conversation) ?? "")).toEqual({ type: "session.update", model: MODEL, session: { type: "realtime", audio: { input: { transcription: { model: SPEACHES.transcription, prompt: "p" } } } } });
    // One the server did not announce is dropped, the other named as announced.
    expect(JSON.parse(pin(other, key("conversation", { transcription: null, speech: "tts" })) ?? "")).toEqual({ type: "session.update", model: MODEL, session: { input_audio_transcription: { language: "en" }, speech_model: "tts" } });
    // In a transcription session the transcriber is the deployment's model, whatever was announced; the speech model is the announced one.
    expect(JSON.parse(pin(other, key("transcription", SPEACHES)) ?? "")).toEqual({ type: "session.update", model: MODEL, session: { input_audio_transcription: { model: MODEL, language: "en" }, speech_model: SPEACHES.speech } });
  });

  it("leaves a transcription that names no model, or turned off, as it is, for every key", () => {
    for (const off of ['{"type":"session.update","session":{"input_audio_transcription":null}}', '{"type":"session.update","session":{"audio":{"input":{"transcription":{"language":"en"}}}}}']) {
      for (const pins of ["owner", key("conversation"), key("transcription"), key("conversation", SPEACHES)] as const) expect(JSON.parse(pin(off, pins) ?? "")).toEqual({ ...JSON.parse(off), model: MODEL });
    }
  });

  it("reads a session's intent as the handshake's last intent says (FastAPI's reading): a conversation unless it says transcription", () => {
    expect(["?model=m", "?model=m&intent=conversation", "?intent=transcription&intent=conversation", "?intent=Transcription"].map(sessionIntent)).toEqual(["conversation", "conversation", "conversation", "conversation"]);
    expect(["?model=m&intent=transcription", "?intent=conversation&intent=transcription"].map(sessionIntent)).toEqual(["transcription", "transcription"]);
  });

  it("is not passed on when the gateway cannot read it (NaN, which Python's parser takes)", () => {
    expect(pin('{"type":"session.update","model":"other","temperature":NaN}')).toBeNull();
  });
});

describe("the models a backend's session.created announces", () => {
  const MAX = 1 << 20;
  it("are its session's transcription model (OpenAI's beta layout, as Speaches sends it, or its GA one) and Speaches' speech_model, its type first or last", () => {
    const speaches = JSON.stringify({ type: "session.created", event_id: "e1", session: { id: "s", model: "m", speech_model: SPEACHES.speech, input_audio_transcription: { model: SPEACHES.transcription, language: null }, turn_detection: { type: "server_vad" } } });
    expect(announcedModels(speaches, MAX)).toEqual(SPEACHES);
    const ga = JSON.stringify({ event_id: "e1", session: { type: "realtime", audio: { input: { transcription: { model: "gpt-4o-transcribe" } } } }, type: "session.created" });
    expect(announcedModels(ga, MAX)).toEqual({ transcription: "gpt-4o-transcribe", speech: null });
    // OpenAI's beta default (transcription off) and vLLM's (no session object's models): nothing announced.
    expect(announcedModels('{"type":"session.created","session":{"input_audio_transcription":null,"voice":"alloy"}}', MAX)).toEqual(NONE_ANNOUNCED);
    expect(announcedModels('{"type":"session.created","session":{"input_audio_transcription":{"model":7},"speech_model":null}}', MAX)).toEqual(NONE_ANNOUNCED);
  });

  it("are none for another message: another type (one naming session.created inside it too), a session.created without a session, not JSON, or longer than the bound", () => {
    const speaches = JSON.stringify({ type: "session.created", session: { speech_model: SPEACHES.speech } });
    for (const other of [
      JSON.stringify({ type: "session.updated", session: { speech_model: "tts" } }),
      JSON.stringify({ type: "conversation.item.created", item: { content: [{ type: "input_text", text: speaches }] } }),
      JSON.stringify({ type: "response.audio.delta", delta: Buffer.alloc(48_000).toString("base64") }),
      '{"type":"session.created","id":"sess-1"}',
      '{"type":"session.created","session":{"speech_model":"x"},',
    ]) {
      expect(announcedModels(other, MAX)).toBeNull();
    }
    expect(announcedModels(speaches, speaches.length)).toEqual({ transcription: null, speech: SPEACHES.speech });
    expect(announcedModels(speaches, speaches.length - 1)).toBeNull();
  });
});

describe("any other client message", () => {
  it("is passed on as it came, unparsed: audio, another event, text that is not JSON", () => {
    const append = JSON.stringify({ type: "input_audio_buffer.append", audio: Buffer.alloc(4800, 7).toString("base64") });
    expect(pin(append)).toBe(append);
    const item = JSON.stringify({ type: "conversation.item.create", item: { content: [{ type: "input_text", text: 'say "session.update"\n' }] } });
    expect(pin(item)).toBe(item);
    expect(pin("hello")).toBe("hello");
    // Escaped slashes (PHP's encoder writes \/ in base64) spell no session.update: not read, even when unreadable.
    const escaped = '{"type":"input_audio_buffer.append","audio":"ab\\/cd","n":NaN}';
    expect(pin(escaped)).toBe(escaped);
    // Not JSON, and no session.update in it: the backend says so itself.
    expect(pin('{"type":"response.create",')).toBe('{"type":"response.create",');
  });
});

describe("a virtual key's client event naming the engine's session", () => {
  it("is refused as the engine reads it: a session.update's session_id or id (in its session, else at its top level), any session.resume; its type named twice (the last counts) or spelt with escapes", () => {
    const param = (message: string) => engineSessionRefusal(message)?.param;
    expect(param('{"type":"session.update","session":{"session_id":"x"}}')).toBe("session.session_id");
    expect(param('{"type":"session.update","session":{"id":""},"session_id":"x"}')).toBe("session.id");
    expect(param('{"type":"session.update","session":"not an object","id":"x"}')).toBe("id");
    expect(param('{"type":"session\\u002eresume"}')).toBe("type");
    expect(param('{"type":"session.resume","type":"session.update","model":"m"}')).toBeUndefined();
    expect(param('{"type":"session.update","session":{"voice":"alloy","event_id":"e"}}')).toBeUndefined();
  });

  it("is not parsed unless it may be a session.update or a session.resume; one of those that is not JSON here (NaN: the engine's parser takes it) is refused as unreadable", () => {
    expect(engineSessionRefusal(JSON.stringify({ type: "conversation.item.create", session_id: "x" }))).toBeNull();
    expect(engineSessionRefusal('{"type":"session.update","session_id":NaN}')?.code).toBe("invalid_json");
    expect(engineSessionRefusal('{"type":"session.resume","session_id":"x","n":Infinity}')?.code).toBe("invalid_json");
  });
});
