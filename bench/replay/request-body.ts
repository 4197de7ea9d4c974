/**
 * Request bodies built from pre-serialized messages. A conversation's history is serialized once,
 * message by message, as it grows, rather than re-serializing the whole history on every turn:
 * the body of turn n is the joined JSON of its messages between a fixed head and tail.
 */

const RESERVED = new Set(["model", "messages", "max_tokens", "stream", "stream_options"]);

export interface BodyFrame {
  head: string;
  tail: string;
}

/** The parts of every body around `"messages":[...],"max_tokens":n`; extra fields cannot replace the reserved ones. */
export function bodyFrame(model: string, extraBody: Readonly<Record<string, unknown>>): BodyFrame {
  const extra: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(extraBody)) if (!RESERVED.has(key)) extra[key] = value;
  const extraJson = JSON.stringify(extra).slice(1, -1);
  return {
    head: `{"model":${JSON.stringify(model)},`,
    tail: `,"stream":true,"stream_options":{"include_usage":true}${extraJson === "" ? "" : `,${extraJson}`}}`,
  };
}

/** `messagesJson` are the JSON texts of the messages, in order. */
export function requestBody(frame: BodyFrame, messagesJson: readonly string[], maxTokens: number): Buffer {
  return Buffer.from(`${frame.head}"messages":[${messagesJson.join(",")}],"max_tokens":${maxTokens}${frame.tail}`);
}
