import fc from "fast-check";

/**
 * Generators of hostile requests for test/workers/hostile-input.test.ts. Each generated request
 * says what the gateway must answer, or carries what the test needs to judge the answer.
 *
 * Bodies are written by hand rather than by JSON.stringify, so they can hold what it never writes:
 * a key twice (JSON.parse keeps the last), `__proto__` as a plain key, 1e400, -0.
 */

/** JSON text used as it is. */
export class Raw {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
}

type Json = null | boolean | number | string | Raw | Json[] | { [key: string]: Json };
/** An object's members in order; a key may repeat. */
type Members = [string, Json][];

function writeJson(v: Json): string {
  if (v instanceof Raw) return v.text;
  if (Array.isArray(v)) return `[${v.map(writeJson).join(",")}]`;
  if (v !== null && typeof v === "object") return writeMembers(Object.entries(v));
  return JSON.stringify(v);
}

const writeMembers = (members: Members): string => `{${members.map(([k, v]) => `${JSON.stringify(k)}:${writeJson(v)}`).join(",")}}`;

const encoder = new TextEncoder();
export const utf8 = (text: string): Uint8Array => encoder.encode(text);

/** The models of the groups these requests may reach: test/support/test-config.ts declares them. */
export const HOSTILE_MODELS = ["hostile", "hostile-alias", "hostile-prefix"] as const;
/** maxPrefixBlocks of each of those groups. */
export const PREFIX_CAP: Record<string, number> = { hostile: 2048, "hostile-alias": 2048, "hostile-prefix": 4 };

// ---------------------------------------------------------------------------------------------
// Text and values

const SPECIAL_CHARS = ["\u0000", "\u0001", "\u0002", "\n", "\r", "\t", '"', "\\", "/", "\u2028", "\u2029", "\ufeff", "\ufffd", "\u{1f600}", "\u{10ffff}", "é", "€"];

/** One character: any code point, a lone surrogate (JSON.stringify escapes it), or a troublemaker. */
const char = fc.oneof(
  { weight: 6, arbitrary: fc.string({ unit: "binary", minLength: 1, maxLength: 1 }) },
  { weight: 1, arbitrary: fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c)) },
  { weight: 2, arbitrary: fc.constantFrom(...SPECIAL_CHARS) },
);

const text = (maxLength = 32, minLength = 0) => fc.string({ unit: char, minLength, maxLength });

/** Numbers a parser may choke on, written as JSON text. */
const ABSURD_NUMBERS = [
  "1e400", "-1e400", "-0", "0e0", "1e-400", "4.9e-324", "1.7976931348623157e308", "123456789012345678901234567890",
  "-9007199254740993", "9007199254740993", "0.1e1", "1E+2", "1.0", "-1", "0.5",
];
const absurdNumber = fc.oneof(
  fc.constantFrom(...ABSURD_NUMBERS).map((t) => new Raw(t)),
  // JSON.stringify writes NaN and ±Infinity as null, which is a valid value for some fields.
  fc.double({ noNaN: true, noDefaultInfinity: true }),
  fc.integer({ min: -(2 ** 31), max: 2 ** 31 }),
);

/** `levels` nested arrays, objects or both around a scalar. */
export function nested(levels: number, kind: "array" | "object" | "mixed"): Raw {
  const open: string[] = [];
  const close: string[] = [];
  for (let i = 0; i < levels; i++) {
    const array = kind === "array" || (kind === "mixed" && i % 2 === 0);
    open.push(array ? "[" : '{"a":');
    close.push(array ? "]" : "}");
  }
  return new Raw(open.join("") + "1" + close.reverse().join(""));
}

/** Nesting around the gateway's depth limit (128 levels, the body itself the first) and far past it. */
const deepNesting = fc
  .tuple(fc.oneof(fc.integer({ min: 120, max: 135 }), fc.integer({ min: 1, max: 10_000 })), fc.constantFrom("array" as const, "object" as const, "mixed" as const))
  .map(([levels, kind]) => nested(levels, kind));

const hugeArray = fc.tuple(fc.integer({ min: 1_000, max: 20_000 }), fc.constantFrom("0", "null", '""', "{}", "[]", "1e400")).map(
  ([n, item]) => new Raw(`[${Array.from({ length: n }, () => item).join(",")}]`),
);

const jsonValue = fc.jsonValue({ maxDepth: 3 }) as fc.Arbitrary<Json>;

/** Keys the gateway or the simulated upstream read: an extra member must not be one of them. */
const RESERVED = new Set(["model", "messages", "prompt", "max_tokens", "max_completion_tokens", "n", "temperature", "top_p", "stream", "stream_options", "tools", "kvgate_sim"]);
const extraKey = fc
  .oneof(
    fc.constantFrom("__proto__", "constructor", "toString", "valueOf", "hasOwnProperty", "", "top_k", "min_p", "seed", "user", "logit_bias", "chat_template_kwargs", "repetition_penalty"),
    text(16),
  )
  .filter((k) => !RESERVED.has(k));
/** An object with keys around the gateway's limit for one object (1,024, src/openai/body-shape.ts). */
const manyKeys = fc.integer({ min: 1_000, max: 1_050 }).map((n) => new Raw(`{${Array.from({ length: n }, (_, i) => `"${i}":0`).join(",")}}`));

const extraValue: fc.Arbitrary<Json> = fc.oneof(
  { weight: 4, arbitrary: jsonValue },
  { weight: 2, arbitrary: absurdNumber },
  { weight: 1, arbitrary: deepNesting },
  { weight: 1, arbitrary: hugeArray },
  { weight: 1, arbitrary: manyKeys },
);
/** Fields the gateway does not know: they pass through to the upstream untouched. */
const extras = fc.array(fc.tuple(extraKey, extraValue), { maxLength: 4 });

// ---------------------------------------------------------------------------------------------
// Valid bodies

const role = fc.oneof({ weight: 4, arbitrary: fc.constantFrom("system", "user", "assistant", "tool", "developer") }, { weight: 1, arbitrary: text(12, 1) });

const contentPart: fc.Arbitrary<Json> = fc.oneof(
  fc.record({ type: fc.constant("text"), text: text(48) }),
  fc.record({ type: fc.constant("image_url"), image_url: fc.record({ url: text(48) }) }),
  fc.tuple(text(12), fc.dictionary(extraKey, jsonValue, { maxKeys: 3 })).map(([type, rest]) => ({ ...rest, type })),
  // vLLM's simple parts: no type, or a plain string.
  fc.record({ image_url: text(48) }),
  text(48),
);

const toolCall: fc.Arbitrary<Json> = fc.record({
  id: text(12),
  type: fc.constant("function"),
  // The name stays a string: the simulated upstream renders it with String(), and an object with a
  // non-callable toString crashes it (a simulator bug, not the gateway's).
  function: fc.record({ name: text(12), arguments: fc.oneof(text(48), jsonValue) }),
});

const message: fc.Arbitrary<Json> = fc.record(
  {
    role,
    content: fc.oneof({ weight: 4, arbitrary: text(64) }, { weight: 1, arbitrary: fc.constant(null) }, { weight: 2, arbitrary: fc.array(contentPart, { maxLength: 4 }) }),
    // Sometimes null, as SGLang's answers carry them.
    name: fc.option(text(12), { freq: 4, nil: null }),
    tool_call_id: fc.option(text(12), { freq: 4, nil: null }),
    tool_calls: fc.option(fc.array(toolCall, { maxLength: 2 }), { freq: 4, nil: null }),
  },
  { requiredKeys: ["role"] },
);

const tool: fc.Arbitrary<Json> = fc.record({
  type: fc.constant("function"),
  function: fc.record({ name: text(12), description: text(32), parameters: jsonValue }, { requiredKeys: ["name"] }),
});

/** Sampling fields, each valid; the simulated upstream takes n: 1 only and max_tokens >= 1. */
const sampling: fc.Arbitrary<Members> = fc
  .record(
    {
      stream: fc.oneof(fc.boolean(), fc.constant(null)),
      stream_options: fc.record({ include_usage: fc.oneof(fc.boolean(), fc.constant(null)) }),
      n: fc.constantFrom(1, null),
      temperature: fc.oneof(fc.double({ min: 0, max: 2, noNaN: true }), fc.constant(null)),
      top_p: fc.oneof(fc.double({ min: 0, max: 1, noNaN: true }), fc.constant(null)),
    },
    { requiredKeys: [] },
  )
  .map((r) => Object.entries(r) as Members);

/** Earlier occurrences of keys every valid body has, with junk: JSON.parse keeps the last, so the body stays valid. */
const shadowed = fc.array(fc.tuple(fc.constantFrom("model", "messages", "max_tokens"), jsonValue), { maxLength: 2 });

export interface BodyCase {
  label: string;
  endpoint: "chat" | "completions";
  /** The body as JSON text. */
  text: string;
}

export const validChat: fc.Arbitrary<BodyCase> = fc
  .record({
    shadow: shadowed,
    model: fc.constantFrom(...HOSTILE_MODELS),
    messages: fc.array(message, { minLength: 1, maxLength: 6 }),
    maxTokens: fc.integer({ min: 1, max: 4 }),
    sampling,
    tools: fc.option(fc.array(tool, { maxLength: 3 }), { nil: undefined }),
    extras,
  })
  .map((r) => ({
    label: "valid chat",
    endpoint: "chat" as const,
    text: writeMembers([
      ...r.shadow,
      ["model", r.model],
      ["messages", r.messages],
      ["max_tokens", r.maxTokens],
      ...r.sampling,
      ...(r.tools ? ([["tools", r.tools]] as Members) : []),
      ...r.extras,
    ]),
  }));

const tokenIds = fc.array(fc.nat({ max: 200_000 }), { minLength: 1, maxLength: 64 });

export const validCompletion: fc.Arbitrary<BodyCase> = fc
  .record({
    model: fc.constantFrom(...HOSTILE_MODELS),
    prompt: fc.oneof(text(200), text(64).map((t) => [t]), tokenIds, tokenIds.map((ids) => [ids])),
    maxTokens: fc.integer({ min: 1, max: 4 }),
    sampling,
    extras,
  })
  .map((r) => ({
    label: "valid completion",
    endpoint: "completions" as const,
    text: writeMembers([["model", r.model], ["prompt", r.prompt], ["max_tokens", r.maxTokens], ...r.sampling, ...r.extras]),
  }));

/**
 * Long arrays the schema takes at any length: tools, content parts and tool calls around and far
 * past the configured counts (test/support/test-config.ts: 64, 256 and 128), a token-id prompt and
 * a passed-through field, which have no count.
 */
export const hugeValid: fc.Arbitrary<BodyCase> = fc
  .record({
    model: fc.constantFrom(...HOSTILE_MODELS),
    n: fc.oneof(fc.integer({ min: 1, max: 8_000 }), fc.constantFrom(63, 64, 65, 127, 128, 129, 255, 256, 257)),
    where: fc.constantFrom("prompt", "parts", "tools", "tool_calls", "extra"),
  })
  .map(({ model, n, where }) => {
    const many = (item: string) => new Raw(`[${Array.from({ length: n }, () => item).join(",")}]`);
    const user: Json = { role: "user", content: "hi" };
    const members: Members =
      where === "prompt"
        ? [["model", model], ["prompt", many("7")], ["max_tokens", 1]]
        : where === "parts"
          ? [["model", model], ["messages", [{ role: "user", content: many('{"type":"text","text":"a"}') }]], ["max_tokens", 1]]
          : where === "tools"
            ? [["model", model], ["messages", [user]], ["tools", many("{}")], ["max_tokens", 1]]
            : where === "tool_calls"
              ? [["model", model], ["messages", [{ role: "assistant", content: null, tool_calls: many("{}") }, user]], ["max_tokens", 1]]
              : [["model", model], ["messages", [user]], ["max_tokens", 1], ["padding", many("1e400")]];
    return { label: `huge ${where} array (${n})`, endpoint: where === "prompt" ? ("completions" as const) : ("chat" as const), text: writeMembers(members) };
  });

// ---------------------------------------------------------------------------------------------
// Invalid bodies: one field of a valid body made wrong, and the param the error must name

export interface WrongShape extends BodyCase {
  /** `param` of the 400 (null: the body as a whole). */
  param: string | null;
  /** Whether the field is there (a wrong value) or left out (required). */
  present: boolean;
}

/** Not a string, and not null either: what a field that takes null (a message's name) refuses. */
const neitherStringNorNull = fc.oneof(absurdNumber, fc.boolean(), fc.array(jsonValue, { maxLength: 2 }), fc.dictionary(extraKey, jsonValue, { maxKeys: 2 }));
const notAString = fc.oneof(neitherStringNorNull, fc.constant(null));
const notANumber = fc.oneof(text(8), fc.boolean(), fc.array(jsonValue, { maxLength: 2 }), fc.dictionary(extraKey, jsonValue, { maxKeys: 2 }), fc.constantFrom("1e400", "-1e400").map((t) => new Raw(t)));
const notAnObject = fc.oneof(text(8), absurdNumber, fc.boolean(), fc.array(jsonValue, { maxLength: 2 }));
const notAnArray = fc.oneof(text(8), absurdNumber, fc.boolean(), fc.dictionary(extraKey, jsonValue, { maxKeys: 2 }));
const notABoolean = fc.oneof(text(8), absurdNumber, fc.array(jsonValue, { maxLength: 2 }), fc.dictionary(extraKey, jsonValue, { maxKeys: 2 }));
/** Not an integer: a fraction, or no number. Its range is the server's to judge (llama.cpp takes a max_tokens of -1). */
const notAnInteger = fc.oneof(notANumber, fc.double({ min: -1e6, max: 1e6, noNaN: true }).filter((x) => !Number.isInteger(x)), fc.constantFrom(2 ** 53, -(2 ** 53)));

interface Mutation {
  field: string;
  value: Json | undefined;
  param: string | null;
}

const user: Json = { role: "user", content: "hi" };

/** Replaces (or with undefined removes) a top-level member. */
function mutate(base: Members, field: string, value: Json | undefined): Members {
  const out = base.filter(([k]) => k !== field);
  return value === undefined ? out : [...out, [field, value]];
}

const chatMutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ field: fc.constant("model"), value: fc.oneof(notAString, fc.constant(""), fc.constant(undefined)), param: fc.constant("model") }),
  fc.record({ field: fc.constant("messages"), value: fc.oneof(notAnArray, fc.constant<Json>([]), fc.constant(undefined)), param: fc.constant("messages") }),
  fc.record({ field: fc.constant("max_tokens"), value: notAnInteger, param: fc.constant("max_tokens") }),
  fc.record({ field: fc.constant("max_completion_tokens"), value: notAnInteger, param: fc.constant("max_completion_tokens") }),
  fc.record({ field: fc.constant("n"), value: notAnInteger, param: fc.constant("n") }),
  fc.record({ field: fc.constant("temperature"), value: notANumber, param: fc.constant("temperature") }),
  fc.record({ field: fc.constant("top_p"), value: notANumber, param: fc.constant("top_p") }),
  fc.record({ field: fc.constant("stream"), value: notABoolean, param: fc.constant("stream") }),
  fc.record({ field: fc.constant("stream_options"), value: notAnObject, param: fc.constant("stream_options") }),
  fc.record({ field: fc.constant("stream_options"), value: notABoolean.map((v) => ({ include_usage: v })), param: fc.constant("stream_options.include_usage") }),
  fc.record({ field: fc.constant("tools"), value: notAnArray, param: fc.constant("tools") }),
  fc.record({ field: fc.constant("tools"), value: notAnObject.map((v) => [v]), param: fc.constant("tools[0]") }),
);

/** A message made wrong, and where in it the error must point. */
const messageMutation: fc.Arbitrary<{ message: Json; at: string }> = fc.oneof(
  notAnObject.map((v) => ({ message: v, at: "" })),
  fc.oneof(notAString, fc.constant("")).map((v) => ({ message: { role: v, content: "x" }, at: ".role" })),
  fc.constant({ message: { content: "x" }, at: ".role" }),
  fc.oneof(absurdNumber, fc.boolean(), fc.dictionary(extraKey, jsonValue, { maxKeys: 2 })).map((v) => ({ message: { role: "user", content: v }, at: ".content" })),
  // A content part must be an object or a plain string (vLLM takes both), its type (vLLM's simple parts have none) a string.
  fc.oneof(absurdNumber, fc.boolean(), fc.array(jsonValue, { maxLength: 2 }), fc.constant(null), notAString.map((t) => ({ type: t }))).map((p) => ({ message: { role: "user", content: [p] }, at: ".content" })),
  // Null is taken for these (as vLLM and SGLang take it): only another type is refused.
  neitherStringNorNull.map((v) => ({ message: { role: "user", content: "x", name: v }, at: ".name" })),
  neitherStringNorNull.map((v) => ({ message: { role: "tool", content: "x", tool_call_id: v }, at: ".tool_call_id" })),
  notAnArray.map((v) => ({ message: { role: "assistant", content: null, tool_calls: v }, at: ".tool_calls" })),
  notAnObject.map((v) => ({ message: { role: "assistant", content: null, tool_calls: [v] }, at: ".tool_calls[0]" })),
);

const chatBase: Members = [["model", "hostile"], ["messages", [user]], ["max_tokens", 1]];
const completionBase: Members = [["model", "hostile"], ["prompt", "hi"], ["max_tokens", 1]];

export const wrongShape: fc.Arbitrary<WrongShape> = fc.oneof(
  { weight: 5, arbitrary: chatMutation.map((m) => ({ label: `chat ${m.field} = ${show(m.value)}`, endpoint: "chat" as const, text: writeMembers(mutate(chatBase, m.field, m.value)), param: m.param, present: m.value !== undefined })) },
  {
    weight: 4,
    arbitrary: fc.tuple(fc.nat({ max: 4 }), messageMutation).map(([index, m]) => {
      const messages: Json[] = [...Array.from({ length: index }, () => user), m.message, user];
      const present = !(m.at === ".role" && typeof m.message === "object" && m.message !== null && !Array.isArray(m.message) && !("role" in m.message));
      return { label: `chat messages[${index}]${m.at} = ${show(m.message)}`, endpoint: "chat" as const, text: writeMembers(mutate(chatBase, "messages", messages)), param: `messages[${index}]${m.at}`, present };
    }),
  },
  {
    weight: 2,
    arbitrary: fc
      .oneof(
        // Null is a prompt not given (vLLM's prompt_embeds may stand in): "is required", as when left out.
        fc.oneof(absurdNumber, fc.boolean(), fc.constant(null), fc.dictionary(extraKey, jsonValue, { maxKeys: 2 })),
        // Arrays mixing strings with token ids, or holding anything else.
        fc.constantFrom<Json>([1, "a"], ["a", 1], [[1], "a"], [["a"]], [null], [true], [{}], [[1, "a"]], [[{}]]),
        fc.constant(undefined),
      )
      .map((v) => ({ label: `completion prompt = ${show(v)}`, endpoint: "completions" as const, text: writeMembers(mutate(completionBase, "prompt", v)), param: "prompt", present: v !== undefined && v !== null })),
  },
  {
    weight: 1,
    arbitrary: fc.oneof(fc.array(jsonValue, { maxLength: 3 }), text(8), absurdNumber, fc.boolean(), fc.constant(null)).map((v) => ({
      label: `body = ${show(v)}`,
      endpoint: "chat" as const,
      text: writeJson(v),
      param: null,
      present: true,
    })),
  },
);

/** An unknown model: the gateway answers 404 before any routing. */
export const unknownModel: fc.Arbitrary<BodyCase> = fc
  .oneof(fc.constantFrom("constructor", "__proto__", "toString", "hasOwnProperty", "HOSTILE", "hostile ", " hostile", "hostile\u0000", "gpt-4o"), text(24, 1))
  .filter((m) => !(HOSTILE_MODELS as readonly string[]).includes(m))
  .map((model) => ({ label: `unknown model ${JSON.stringify(model)}`, endpoint: "chat" as const, text: writeMembers([["model", model], ["messages", [user]], ["max_tokens", 1]]) }));

// ---------------------------------------------------------------------------------------------
// Malformed bytes

/** Byte sequences that are never UTF-8: stray continuations, overlong forms, surrogates, > U+10FFFF, cut sequences. */
const INVALID_UTF8 = [[0xff], [0xfe], [0x80], [0xbf], [0xc0, 0x80], [0xc1, 0xbf], [0xe0, 0x80, 0x80], [0xed, 0xa0, 0x80], [0xf4, 0x90, 0x80, 0x80], [0xf8, 0x88, 0x80, 0x80, 0x80], [0xe2, 0x82], [0xf0, 0x9f, 0x98]];
const JSON_TOKENS = ["{", "}", "[", "]", ":", ",", '"', "\\", '"model"', '"messages"', '"hostile"', "null", "true", "1e999", "-", ".", "\\u", "\\ud800", "'", "/*", "//", "NaN", "Infinity", "0x10", "\u00a0", "\ufeff", " "];

function splice(bytes: Uint8Array, at: number, remove: number, insert: ArrayLike<number>): Uint8Array {
  const i = Math.min(at, bytes.length);
  const out = new Uint8Array(bytes.length - Math.min(remove, bytes.length - i) + insert.length);
  out.set(bytes.subarray(0, i), 0);
  out.set(insert, i);
  out.set(bytes.subarray(i + remove), i + insert.length);
  return out;
}

interface BytesCase {
  label: string;
  bytes: Uint8Array;
}

const validBytes = fc.oneof(validChat, validCompletion).map((c) => ({ endpoint: c.endpoint, bytes: utf8(c.text) }));

export const malformed: fc.Arbitrary<BytesCase> = fc.oneof(
  fc.tuple(validBytes, fc.nat()).map(([v, at]) => ({ label: "truncated", bytes: v.bytes.subarray(0, at % Math.max(1, v.bytes.length)) })),
  fc.tuple(validBytes, fc.nat(), fc.constantFrom(...INVALID_UTF8)).map(([v, at, bad]) => ({ label: `invalid UTF-8 ${bad.map((b) => b.toString(16)).join(" ")}`, bytes: splice(v.bytes, at % (v.bytes.length + 1), 0, bad) })),
  fc.tuple(validBytes, fc.nat(), fc.nat({ max: 3 }), fc.constantFrom(...JSON_TOKENS)).map(([v, at, remove, token]) => ({ label: `spliced ${JSON.stringify(token)}`, bytes: splice(v.bytes, at % (v.bytes.length + 1), remove, utf8(token)) })),
  fc.tuple(validBytes, fc.nat(), fc.uint8Array({ minLength: 1, maxLength: 4 })).map(([v, at, junk]) => ({ label: "overwritten bytes", bytes: splice(v.bytes, at % (v.bytes.length + 1), junk.length, junk) })),
  fc.uint8Array({ maxLength: 256 }).map((bytes) => ({ label: "random bytes", bytes })),
  text(128).map((t) => ({ label: "random text", bytes: utf8(t) })),
  fc.array(fc.constantFrom(...JSON_TOKENS), { maxLength: 40 }).map((ts) => ({ label: "token soup", bytes: utf8(ts.join("")) })),
  fc.constantFrom("", " ", "\n\t\r ", "\u00a0", "\ufeff", "\ufeff\ufeff{}", "null", "{}", "[]", '""', "0", "{'model':'hostile'}", '{"model":"hostile",}', '{"model":"hostile"} {"x":1}', '{"model":"hostile"}garbage').map((t) => ({ label: `literal ${JSON.stringify(t)}`, bytes: utf8(t) })),
  // A byte-order mark is dropped by the UTF-8 decoder; UTF-16 is not UTF-8.
  validBytes.map((v) => ({ label: "UTF-8 BOM + valid body", bytes: splice(v.bytes, 0, 0, [0xef, 0xbb, 0xbf]) })),
  validBytes.map((v) => ({ label: "UTF-16", bytes: utf16(new TextDecoder().decode(v.bytes)) })),
);

function utf16(textValue: string): Uint8Array {
  const out = new Uint8Array(2 + textValue.length * 2);
  out[0] = 0xff;
  out[1] = 0xfe;
  for (let i = 0; i < textValue.length; i++) {
    const c = textValue.charCodeAt(i);
    out[2 + 2 * i] = c & 0xff;
    out[3 + 2 * i] = c >> 8;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Headers

/**
 * A header value the Headers class accepts: no NUL, CR or LF. ASCII only: workerd would encode
 * bytes past 0x7f as UTF-8 (no client sends them that way) and log a warning for each.
 */
const headerChar = fc.oneof({ weight: 9, arbitrary: fc.integer({ min: 0x20, max: 0x7f }) }, { weight: 1, arbitrary: fc.constant(0x09) }).map((c) => String.fromCharCode(c));
const headerValue = (maxLength = 64) => fc.string({ unit: headerChar, maxLength });
const TOKEN_CHARS = "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".split("");
const token = (maxLength = 24) => fc.string({ unit: fc.constantFrom(...TOKEN_CHARS), minLength: 1, maxLength });
/** Headers the request under test sets itself, and headers that change the framing of a body. */
const OWN_HEADERS = new Set(["authorization", "origin", "x-request-id", "content-type", "content-length", "transfer-encoding", "host", "content-encoding"]);

export interface AuthCase {
  label: string;
  values: string[];
  valid: boolean;
}

const ws = fc.array(fc.constantFrom(" ", "\t"), { minLength: 1, maxLength: 3 }).map((a) => a.join(""));

/** Authorization headers, and whether the gateway must let them in. */
export function authorization(key: string): fc.Arbitrary<AuthCase> {
  const mangled = fc.oneof(
    fc.constant(`${key}x`),
    fc.constant(key.slice(0, -1)),
    fc.constant(key.toUpperCase()),
    fc.nat({ max: key.length - 1 }).map((i) => key.slice(0, i) + (key[i] === "0" ? "1" : "0") + key.slice(i + 1)),
    headerValue(48).filter((v) => v.trim() !== key),
  );
  return fc.oneof(
    { weight: 4, arbitrary: fc.tuple(fc.constantFrom("Bearer", "bearer", "BEARER", "bEaReR"), ws, fc.constantFrom("", " ", "\t ")).map(([scheme, sep, tail]) => ({ label: "valid key", values: [`${scheme}${sep}${key}${tail}`], valid: true })) },
    { weight: 1, arbitrary: fc.constant<AuthCase>({ label: "no key", values: [], valid: false }) },
    { weight: 2, arbitrary: mangled.map((k) => ({ label: "wrong key", values: [`Bearer ${k}`], valid: false })) },
    { weight: 1, arbitrary: fc.constantFrom(`Basic ${key}`, `Token ${key}`, key, `Bearer${key}`, `Bearer: ${key}`, "Bearer", "Bearer ", `Bearer ${key}, Bearer ${key}`).map((v) => ({ label: `wrong scheme ${JSON.stringify(v.slice(0, 12))}`, values: [v], valid: false })) },
    { weight: 1, arbitrary: headerValue(200).map((v) => ({ label: "junk", values: [v], valid: false })) },
    { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 64_000 }).map((n) => ({ label: `huge (${n})`, values: [`Bearer ${"A".repeat(n)}`], valid: false })) },
    { weight: 1, arbitrary: fc.constant<AuthCase>({ label: "the key twice", values: [`Bearer ${key}`, `Bearer ${key}`], valid: false }) },
  );
}

export const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

export const requestId = fc.oneof(
  fc.stringMatching(/^[A-Za-z0-9._:-]{1,128}$/),
  headerValue(200),
  fc.integer({ min: 129, max: 2000 }).map((n) => "a".repeat(n)),
);

export const contentType = fc.oneof(
  fc.constantFrom("application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json; charset=utf-16", "application/json; charset=latin1", "text/event-stream", "*/*", ";;;"),
  headerValue(64),
);

/** Headers nobody asked for: many, big, repeated. */
export const junkHeaders = fc.oneof(
  { weight: 4, arbitrary: fc.array(fc.tuple(token(), headerValue(128)), { maxLength: 12 }) },
  { weight: 1, arbitrary: fc.tuple(token(), fc.integer({ min: 1_000, max: 32_000 })).map(([name, n]) => [[name, "v".repeat(n)]] as [string, string][]) },
  { weight: 1, arbitrary: fc.tuple(token(), headerValue(16), fc.integer({ min: 2, max: 200 })).map(([name, v, n]) => Array.from({ length: n }, () => [name, v]) as [string, string][]) },
  { weight: 1, arbitrary: fc.integer({ min: 50, max: 300 }).map((n) => Array.from({ length: n }, (_, i) => [`x-junk-${i}`, `${i}`]) as [string, string][]) },
).map((hs) => hs.filter(([name]) => !OWN_HEADERS.has(name.toLowerCase())));

export const origin = fc.option(fc.oneof(fc.constantFrom("https://app.example", "https://evil.example", "null", "https://app.example.evil", "HTTPS://APP.EXAMPLE"), headerValue(40)), { nil: undefined });

// ---------------------------------------------------------------------------------------------
// Methods and paths

/**
 * Methods workerd's Request takes (it knows a fixed list and refuses other tokens, as it refuses
 * CONNECT and TRACE), in any letter case.
 */
const OTHER_METHODS = ["PURGE", "COPY", "LOCK", "MKCOL", "MOVE", "PROPFIND", "PROPPATCH", "SEARCH", "UNLOCK", "ACL", "REPORT", "MKACTIVITY", "CHECKOUT", "MERGE", "NOTIFY", "SUBSCRIBE", "UNSUBSCRIBE", "QUERY", "BAN"];

export const method = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS") },
  { weight: 2, arbitrary: fc.mixedCase(fc.constantFrom("get", "post", "put", "patch", "delete", "head", "options")) },
  { weight: 1, arbitrary: fc.mixedCase(fc.constantFrom(...OTHER_METHODS)) },
);

/** The endpoints passed through to vLLM and SGLang beside chat (workers/gateway/endpoints.ts): POST only, each with a body of its own. */
export const PASSED_THROUGH_ROUTES = ["/v1/embeddings", "/v1/responses", "/v1/rerank", "/v1/score", "/rerank", "/v2/rerank", "/score"] as const;

export const ROUTES = ["/health", "/v1/models", "/v1/kvgate/status", "/v1/chat/completions", "/v1/completions", ...PASSED_THROUGH_ROUTES] as const;

export interface PathCase {
  path: string;
  /** True when the path names a route (or no route) as it is written, so the answer is known. */
  exact: boolean;
}

const pathMutation = fc.constantFrom(
  (p: string) => `${p}/`,
  (p: string) => p.replace("/", "//"),
  (p: string) => p.replace(/\/([a-z])/, (_m, c: string) => `/${c.toUpperCase()}`),
  (p: string) => p.replace(/[a-z]/, (c) => `%${c.charCodeAt(0).toString(16)}`),
  (p: string) => p.replace(/(.)\/(?=[^/]*$)/, "$1%2F"),
  (p: string) => p.replace(/\/(?=[^/]*$)/, "/./"),
  (p: string) => p.replace(/\/(?=[^/]*$)/, "/x/../"),
  (p: string) => p.replace(/\//g, "\\"),
  (p: string) => `${p}%`,
  (p: string) => `${p}%zz`,
  (p: string) => `${p}%ff%fe`,
  (p: string) => `${p}/\u00e9\u{1f600}`,
  (p: string) => `${p};jsessionid=1`,
  (p: string) => `/..${p}`,
  (p: string) => `${p}#fragment`,
  (p: string) => p.replace("v1", "v1/%2e%2e/v1"),
  (p: string) => p + "/x".repeat(500),
);

export const path: fc.Arbitrary<PathCase> = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...ROUTES, "/", "/v1/audio/speech", "/v2/chat/completions", "/favicon.ico").map((p) => ({ path: p, exact: true })) },
  { weight: 1, arbitrary: fc.tuple(fc.constantFrom(...ROUTES), fc.webQueryParameters()).map(([p, q]) => ({ path: `${p}?${q}`, exact: true })) },
  { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 16_000 }).map((n) => ({ path: `/v1/${"a".repeat(n)}`, exact: true })) },
  { weight: 3, arbitrary: fc.tuple(fc.constantFrom(...ROUTES), pathMutation).map(([p, m]) => ({ path: m(p), exact: false })) },
  { weight: 2, arbitrary: fc.webPath().map((p) => ({ path: p.startsWith("/") ? p : `/${p}`, exact: false })) },
);

// ---------------------------------------------------------------------------------------------
// Sizes

const PAD = ["x", "é", "€", "\u{1f600}", " "];

/** A valid chat body of exactly `size` bytes (when that is at least its skeleton), padded with `pad`. */
export function bodyOfSize(size: number, pad: string, model = "hostile"): Uint8Array {
  const head = `{"model":${JSON.stringify(model)},"max_tokens":1,"messages":[{"role":"user","content":"`;
  const tail = '"}]}';
  let room = Math.max(0, size - utf8(head + tail).length);
  const padBytes = utf8(pad).length;
  const content = pad.repeat(Math.floor(room / padBytes));
  room -= utf8(content).length;
  return utf8(head + content + "x".repeat(room) + tail);
}

export const padChar = fc.constantFrom(...PAD);

/**
 * Chunk sizes for a streamed body (no content-length), cycled: empty, tiny and big ones mixed.
 * A cycle carries at least 4 KiB, so a body near the limit takes tens of reads, not tens of thousands.
 */
export const chunking = fc
  .array(fc.oneof(fc.integer({ min: 0, max: 16 }), fc.integer({ min: 17, max: 20_000 })), { minLength: 1, maxLength: 6 })
  .filter((sizes) => sizes.reduce((a, b) => a + b, 0) >= 4096);

/** A stream of `bytes` cut into `sizes` (cycled), pulled on demand. */
export function streamOf(bytes: Uint8Array, sizes: number[]): ReadableStream<Uint8Array> {
  let offset = 0;
  let i = 0;
  return new ReadableStream<Uint8Array>(
    {
      pull(controller) {
        if (offset >= bytes.length) return controller.close();
        const n = sizes[i++ % sizes.length] as number;
        controller.enqueue(bytes.slice(offset, offset + n));
        offset += n;
      },
    },
    { highWaterMark: 0 },
  );
}

/** A short rendering of a generated value, for labels. */
function show(v: Json | undefined): string {
  if (v === undefined) return "(missing)";
  const s = writeJson(v);
  return s.length > 60 ? `${s.slice(0, 57)}...` : s;
}
