import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { BlockHasher } from "../../src/prefix/block-hasher.ts";
import { chatFingerprint, completionFingerprint, isFollowUp, isPromptBatch, promptBlocks, responsesFingerprint, unreadChars } from "../../src/prefix/fingerprint.ts";
import { MEDIA_CHARS, mediaOf } from "../../src/prefix/media.ts";
import type { ChatCompletionRequest, CompletionRequest, ResponsesRequest } from "../../src/openai/requests.ts";

const opts = { blockChars: 64, maxBlocks: 2048 };
const system = { role: "system", content: "You are a careful assistant. ".repeat(40) };
const chat = (messages: ChatCompletionRequest["messages"]): ChatCompletionRequest => ({ model: "m", messages });
const commonPrefix = (a: number[], b: number[]) => {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
};

describe("prefix fingerprint", () => {
  it("is deterministic and 53-bit", () => {
    const a = chatFingerprint(chat([system, { role: "user", content: "hi" }]), opts);
    expect(a).toEqual(chatFingerprint(chat([system, { role: "user", content: "hi" }]), opts));
    for (const h of a) expect(Number.isSafeInteger(h) && h >= 0).toBe(true);
  });

  it("keeps every earlier hash when a turn is appended (the chain is prefix-closed)", () => {
    const turn1 = chatFingerprint(chat([system, { role: "user", content: "What is a KV cache?" }]), opts);
    const turn2 = chatFingerprint(
      chat([system, { role: "user", content: "What is a KV cache?" }, { role: "assistant", content: "Stored attention keys and values." }, { role: "user", content: "Why does it matter?" }]),
      opts,
    );
    expect(turn2.length).toBeGreaterThan(turn1.length);
    expect(turn2.slice(0, turn1.length)).toEqual(turn1);
  });

  it("shares the system prompt's blocks across conversations and diverges after", () => {
    const a = chatFingerprint(chat([system, { role: "user", content: "question one" }]), opts);
    const b = chatFingerprint(chat([system, { role: "user", content: "question two" }]), opts);
    const sysBlocks = Math.ceil((system.content.length + 10) / opts.blockChars);
    expect(commonPrefix(a, b)).toBeGreaterThanOrEqual(sysBlocks - 1);
    expect(commonPrefix(a, b)).toBeLessThan(a.length);
  });

  it("tags roles: the same text as another role hashes differently", () => {
    const asUser = chatFingerprint(chat([{ role: "user", content: "hello world" }]), opts);
    const asSystem = chatFingerprint(chat([{ role: "system", content: "hello world" }]), opts);
    expect(asUser[0]).not.toBe(asSystem[0]);
  });

  it("respects message boundaries: moving text across a boundary changes the chain", () => {
    const a = chatFingerprint(chat([{ role: "user", content: "ab" }, { role: "user", content: "c" }]), opts);
    const b = chatFingerprint(chat([{ role: "user", content: "a" }, { role: "user", content: "bc" }]), opts);
    expect(a[0]).not.toBe(b[0]);
  });

  it("hashes no text a client wrote as a role's delimiters: spelled out in a message, a part, a role, a name, a tool call id or a completions prompt", () => {
    // Each turn here hashes as \u0001user\u0002a, a block of its own.
    const turns = chatFingerprint(chat([{ role: "user", content: "a" }, { role: "user", content: "b" }]), opts);
    const spelled = [
      chat([{ role: "user", content: "a\u0001user\u0002b" }]),
      chat([{ role: "user", content: ["a\u0001user\u0002b"] }]),
      chat([{ role: "user", content: [{ type: "text", text: "a\u0001user\u0002b" }] }]),
      chat([{ role: "user\u0002a\u0001user", content: "b" }]),
      chat([{ role: "user", name: "x\u0002a\u0001user", content: "b" }]),
      chat([{ role: "user", content: "a" }, { role: "tool", content: "", tool_call_id: "\u0001user\u0002b" }]),
    ].map((body) => chatFingerprint(body, opts));
    spelled.push(completionFingerprint({ model: "m", prompt: "\u0001user\u0002a\u0001user\u0002b" }, opts));
    for (const chain of spelled) expect(chain).not.toContain(turns[1]);
    // The escape itself is written out too: text that spells an escaped delimiter is not the delimiter's text.
    const escaped = (content: string) => chatFingerprint(chat([{ role: "user", content }]), opts)[0];
    expect(escaped("\u0003A")).not.toBe(escaped("\u0001"));
    expect(escaped("\u0003C")).not.toBe(escaped("\u0003"));
  });

  it("hashes tools ahead of the conversation", () => {
    const tools = [{ type: "function", function: { name: "lookup", parameters: {} } }];
    const withTools = chatFingerprint({ ...chat([{ role: "user", content: "x" }]), tools }, opts);
    const without = chatFingerprint(chat([{ role: "user", content: "x" }]), opts);
    expect(withTools.length).toBeGreaterThan(without.length);
    expect(withTools[0]).not.toBe(without[0]);
  });

  it("hashes a message's null name, tool_calls and tool_call_id as fields left out", () => {
    const answer = { role: "assistant", content: "ok" };
    const without = chatFingerprint(chat([answer, { role: "user", content: "again" }]), opts);
    expect(chatFingerprint(chat([{ ...answer, name: null, tool_calls: null, tool_call_id: null }, { role: "user", content: "again" }]), opts)).toEqual(without);
  });

  it("hashes a content part without a type (vLLM's simple part) as its JSON, the same each time", () => {
    const asked = (url: string) => chatFingerprint(chat([{ role: "user", content: [{ image_url: url }, { type: "text", text: "What is it?" }] }]), opts);
    expect(asked("https://a.example/cat.jpg")).toEqual(asked("https://a.example/cat.jpg"));
    expect(asked("https://a.example/cat.jpg")[0]).not.toBe(asked("https://a.example/dog.jpg")[0]);
  });

  it("caps the chain at maxBlocks", () => {
    const long = chatFingerprint(chat([{ role: "user", content: "x".repeat(64 * 100) }]), { blockChars: 64, maxBlocks: 10 });
    expect(long.length).toBe(10);
  });

  it("fingerprints completions prompts of every accepted shape", () => {
    expect(completionFingerprint({ model: "m", prompt: "abc".repeat(50) }, opts).length).toBe(3);
    expect(completionFingerprint({ model: "m", prompt: ["first", "second"] }, opts)).toEqual(completionFingerprint({ model: "m", prompt: "first" }, opts));
    expect(completionFingerprint({ model: "m", prompt: [1, 2, 3] }, opts).length).toBe(1);
  });

  it("hashes a prompt to the chain it always has: prefix sets a running gateway saved stay valid", () => {
    // Made by the hasher as it was before its loop was rewritten for V8 (lanes seeded as int32s, hashes in a typed array).
    const h = new BlockHasher(16, 6);
    h.push("\u0001system\u0002");
    h.push("You are terse. Réponds en français, s'il te plaît — 日本語も可。");
    h.boundary();
    h.push("\u0001user\u0002");
    h.push("hi");
    h.boundary();
    h.push("never hashed: the chain is full by now, six blocks of sixteen characters");
    expect(h.hashes).toEqual([247433993844464, 7640695251738012, 5769576739565580, 7303041750429414, 2125186693296340, 3262771361152920]);
    expect(h.full).toBe(true);
  });

  it("splits text into blocks of blockChars characters", () => {
    const h = new BlockHasher(4, 100);
    h.push("abcdefghij");
    expect(h.hashes.length).toBe(2);
    h.boundary();
    expect(h.hashes.length).toBe(3);
    h.boundary();
    expect(h.hashes.length).toBe(3);
  });
});

describe("prefix fingerprint, bounded work", () => {
  const small = { blockChars: 8, maxBlocks: 4 };
  /** An item that fails the test if anything serialises it: the fingerprint read past its cap. */
  const untouchable = { toJSON: () => expect.unreachable("serialised an item past the cap") };
  const user = { role: "user", content: "x" };

  it("stops serialising tools once the chain is full", () => {
    const tools = [{ type: "function", description: "d".repeat(64) }, ...Array.from({ length: 1000 }, () => untouchable)];
    expect(chatFingerprint({ model: "m", messages: [user], tools }, small)).toHaveLength(4);
  });

  it("stops serialising content parts and tool calls once the chain is full", () => {
    const parts = [{ type: "image_url", image_url: { url: "u".repeat(64) } }, ...Array.from({ length: 1000 }, () => ({ type: "x", ...untouchable }))];
    expect(chatFingerprint({ model: "m", messages: [{ role: "user", content: parts }] }, small)).toHaveLength(4);
    const calls = [{ id: "c".repeat(64) }, ...Array.from({ length: 1000 }, () => untouchable)];
    expect(chatFingerprint({ model: "m", messages: [{ role: "assistant", content: null, tool_calls: calls }] }, small)).toHaveLength(4);
  });

  it("stops reading token ids once the chain is full", () => {
    const ids = Array.from({ length: 1000 }, (_, i) => i);
    for (const at of [40, 999]) Object.defineProperty(ids, at, { get: () => expect.unreachable(`read token id ${at}`) });
    expect(completionFingerprint({ model: "m", prompt: ids }, small)).toHaveLength(4);
    expect(completionFingerprint({ model: "m", prompt: [ids] }, small)).toHaveLength(4);
  });

  // What the fingerprint hashed before it learned to stop early: the same text, serialised whole.
  // Equal chains keep every backend's learned prefixes valid across the change.
  function wholeChat(body: ChatCompletionRequest, o: typeof opts): number[] {
    const h = new BlockHasher(o.blockChars, o.maxBlocks);
    if (body.tools && body.tools.length > 0) {
      h.push("\u0001tools\u0002");
      h.push(JSON.stringify(body.tools));
      h.boundary();
    }
    for (const m of body.messages) {
      if (h.full) break;
      h.push(`\u0001${m.role}${m.name ? `:${m.name}` : ""}\u0002`);
      if (typeof m.content === "string") h.push(m.content);
      else if (Array.isArray(m.content)) for (const part of m.content) h.push(typeof part === "string" ? part : typeof part.text === "string" ? part.text : JSON.stringify(part));
      if (m.tool_calls) h.push(JSON.stringify(m.tool_calls));
      if (m.tool_call_id) h.push(m.tool_call_id);
      h.boundary();
    }
    return h.hashes;
  }

  it("hashes the same chain as serialising everything whole would", () => {
    const text = fc.string({ maxLength: 40 });
    const part = fc.oneof(fc.record({ type: fc.constant("text"), text }), fc.record({ type: fc.constant("image_url"), image_url: fc.record({ url: text }) }));
    const message = fc.record(
      {
        role: fc.constantFrom("system", "user", "assistant", "tool"),
        content: fc.oneof(text, fc.constant(null), fc.array(part, { maxLength: 4 })),
        name: fc.string({ maxLength: 6 }),
        tool_calls: fc.array(fc.record({ id: text, function: fc.record({ name: text, arguments: text }) }), { maxLength: 3 }),
        tool_call_id: fc.string({ maxLength: 6 }),
      },
      { requiredKeys: ["role"] },
    );
    const tools = fc.option(fc.array(fc.record({ type: fc.constant("function"), function: fc.record({ name: text, parameters: fc.jsonValue({ maxDepth: 2 }) }) }), { maxLength: 3 }), { nil: undefined });
    const options = fc.record({ blockChars: fc.integer({ min: 8, max: 64 }), maxBlocks: fc.integer({ min: 1, max: 12 }) });
    fc.assert(
      fc.property(fc.array(message, { minLength: 1, maxLength: 5 }), tools, options, (messages, t, o) => {
        const body = { model: "m", messages, ...(t ? { tools: t } : {}) } as ChatCompletionRequest;
        expect(chatFingerprint(body, o)).toEqual(wholeChat(body, o));
      }),
    );
    fc.assert(
      fc.property(fc.array(fc.nat(), { minLength: 1, maxLength: 80 }), options, (ids, o) => {
        const whole = new BlockHasher(o.blockChars, o.maxBlocks);
        whole.push(ids.join(","));
        whole.boundary();
        expect(completionFingerprint({ model: "m", prompt: ids }, o)).toEqual(whole.hashes);
        expect(completionFingerprint({ model: "m", prompt: [ids, [1]] }, o)).toEqual(whole.hashes);
      }),
    );
  });
});

describe("Responses API fingerprint: its instructions and input read as chat's messages", () => {
  const responses = (input: ResponsesRequest["input"], extra: Partial<ResponsesRequest> = {}): ResponsesRequest => ({ model: "m", input, ...extra });
  const instructions = system.content;

  it("hashes a request like the same conversation sent as chat: instructions as system, text input as user", () => {
    const tools = [{ type: "function", name: "lookup", parameters: {} }];
    expect(responsesFingerprint(responses("What is a KV cache?", { instructions, tools }), opts)).toEqual(
      chatFingerprint({ ...chat([system, { role: "user", content: "What is a KV cache?" }]), tools }, opts),
    );
    const items = [
      { role: "user", content: [{ type: "input_text", text: "What is a KV cache?" }] },
      { type: "message", role: "assistant", content: [{ type: "output_text", text: "Stored keys and values." }] },
    ];
    expect(responsesFingerprint(responses(items, { instructions }), opts)).toEqual(
      chatFingerprint(chat([system, { role: "user", content: "What is a KV cache?" }, { role: "assistant", content: "Stored keys and values." }]), opts),
    );
  });

  it("keeps every earlier hash when the conversation continues with more items", () => {
    const turn1 = responsesFingerprint(responses([{ role: "user", content: "What is a KV cache?" }], { instructions }), opts);
    const turn2 = responsesFingerprint(
      responses(
        [
          { role: "user", content: "What is a KV cache?" },
          { type: "function_call", call_id: "c1", name: "lookup", arguments: '{"q":"kv cache"}' },
          { type: "function_call_output", call_id: "c1", output: "Attention keys and values, kept per token." },
          { role: "user", content: "Why does it matter?" },
        ],
        { instructions },
      ),
      opts,
    );
    expect(turn2.length).toBeGreaterThan(turn1.length);
    expect(turn2.slice(0, turn1.length)).toEqual(turn1);
  });

  it("tags an item that is no message with its type", () => {
    const call = { call_id: "c1", output: "x" };
    const asOutput = responsesFingerprint(responses([{ type: "function_call_output", ...call }]), opts);
    const asOther = responsesFingerprint(responses([{ type: "custom_tool_call_output", ...call }]), opts);
    expect(asOutput[0]).not.toBe(asOther[0]);
  });

  it("stops reading items once the chain is full", () => {
    const small = { blockChars: 8, maxBlocks: 4 };
    const untouchable = { type: "x", toJSON: () => expect.unreachable("serialised an item past the cap") };
    const items = [{ role: "user", content: "u".repeat(64) }, ...Array.from({ length: 1000 }, () => untouchable)];
    expect(responsesFingerprint(responses(items), small)).toHaveLength(4);
  });
});

describe("a prompt's size in blocks", () => {
  const opts = { blockChars: 64, maxBlocks: 8 };
  const chainOf = (n: number) => Array.from({ length: n }, (_, i) => i + 1);

  it("is its chain's length when the chain was not cut, however large the body", () => {
    expect(promptBlocks(chainOf(5), 1_000_000, opts)).toBe(5);
    expect(promptBlocks([], 1_000_000, opts)).toBe(0);
  });

  it("is the body's bytes over blockChars when the chain was cut, and never less than the chain", () => {
    expect(promptBlocks(chainOf(8), 6_500, opts)).toBe(101);
    expect(promptBlocks(chainOf(8), 100, opts)).toBe(8);
  });
});

describe("media in a prompt: an image, audio or a file sent inline", () => {
  /** `chars` of base64, different for each seed: what the openai SDK sends for a local file. */
  const base64 = (chars: number, seed: number) => {
    const digits = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let s = seed;
    let out = "";
    for (let i = 0; i < chars; i++) out += digits[(s = (Math.imul(s, 1664525) + 1013904223) >>> 0) >>> 26];
    return out;
  };
  const photo = (chars: number, seed = 1) => `data:image/jpeg;base64,${base64(chars, seed)}`;
  const asked = (url: string): ChatCompletionRequest => chat([{ role: "user", content: [{ type: "text", text: "What is in this image?" }, { type: "image_url", image_url: { url } }] }]);
  /** The prompt as the gateway routes it (workers/gateway/validate.ts): its chain, and its size in blocks. */
  const routed = (body: ChatCompletionRequest, o = opts) => {
    const chain = chatFingerprint(body, o);
    return { chain, blocks: promptBlocks(chain, Buffer.byteLength(JSON.stringify(body)), o, false, mediaOf(body.messages)) };
  };

  it("counts a 1 MB image as the fixed tokens of one image, not as its base64 read as text (found by review: 15,627 blocks, ~250k tokens)", () => {
    const image = routed(asked(photo(1_000_000)));
    const text = routed(asked(""));
    const imageBlocks = MEDIA_CHARS / opts.blockChars;
    expect(image.blocks).toBe(image.chain.length);
    expect(image.chain.length - text.chain.length).toBeGreaterThanOrEqual(imageBlocks);
    expect(image.chain.length - text.chain.length).toBeLessThanOrEqual(imageBlocks + 2);
    // Whatever the payload's size: a 10 KB and a 4 MB photo are as many blocks.
    expect(routed(asked(photo(10_000))).chain.length).toBe(image.chain.length);
    expect(routed(asked(photo(4_000_000))).chain.length).toBe(image.chain.length);
  });

  it("hashes the same media alike and different media apart, and keeps the chain prefix-closed", () => {
    const a = photo(200_000, 1);
    const b = photo(200_000, 2);
    expect(chatFingerprint(asked(a), opts)).toEqual(chatFingerprint(asked(a.slice()), opts));
    const first = chatFingerprint(asked(a), opts);
    const other = chatFingerprint(asked(b), opts);
    const textBlocks = chatFingerprint(asked(""), opts).length - 1;
    // The same length and type: they part within the image's first block, as two texts would.
    expect(commonPrefix(first, other)).toBeLessThanOrEqual(textBlocks);
    // One more character, or another last one (a PNG ends with its data's checksums). A change
    // only between the sampled windows is not seen: its request may be routed as the other's.
    expect(chatFingerprint(asked(a.slice(0, -1) + (a.endsWith("A") ? "B" : "A")), opts).at(-1)).not.toBe(first.at(-1));
    expect(chatFingerprint(asked(`${a}A`), opts).at(-1)).not.toBe(first.at(-1));
    const next = chatFingerprint(chat([...asked(a).messages, { role: "assistant", content: "A cat." }, { role: "user", content: "What colour?" }]), opts);
    expect(next.slice(0, first.length)).toEqual(first);
  });

  it("reads every inline form alike: input_audio data, a file's file_data, Responses' input_image and input_file", () => {
    const audio = base64(300_000, 3);
    const pdf = `data:application/pdf;base64,${base64(300_000, 4)}`;
    const sizes = [
      chatFingerprint(chat([{ role: "user", content: [{ type: "input_audio", input_audio: { data: audio, format: "wav" } }] }]), opts),
      chatFingerprint(chat([{ role: "user", content: [{ type: "file", file: { file_data: pdf, filename: "a.pdf" } }] }]), opts),
      responsesFingerprint({ model: "m", input: [{ role: "user", content: [{ type: "input_image", image_url: photo(300_000), detail: "auto" }] }] } as ResponsesRequest, opts),
      responsesFingerprint({ model: "m", input: [{ role: "user", content: [{ type: "input_file", file_data: pdf, filename: "a.pdf" }] }] } as ResponsesRequest, opts),
    ].map((c) => c.length);
    for (const n of sizes) {
      expect(n).toBeGreaterThanOrEqual(MEDIA_CHARS / opts.blockChars);
      expect(n).toBeLessThanOrEqual(MEDIA_CHARS / opts.blockChars + 3);
    }
  });

  it("hashes an image's URL as written, and text that only begins like a data URL as text", () => {
    const url = { role: "user", content: [{ type: "image_url", image_url: { url: "https://a.example/cat.jpg" } }] };
    const h = new BlockHasher(opts.blockChars, opts.maxBlocks);
    h.push("\u0001user\u0002");
    h.push(JSON.stringify(url.content[0]));
    h.boundary();
    expect(chatFingerprint(chat([url]), opts)).toEqual(h.hashes);
    const said = chat([{ role: "user", content: [{ type: "text", text: "data:image/png;base64,iVBOR" }] }]);
    expect(chatFingerprint(said, opts)).toEqual(chatFingerprint(chat([{ role: "user", content: "data:image/png;base64,iVBOR" }]), opts));
    expect(mediaOf(said.messages)).toEqual({ count: 0, chars: 0, unhashed: 0 });
  });

  it("takes a text that begins with 'data:' for text: a tool's output of SSE lines is no data URL (found by review: 69 blocks for 16 characters)", () => {
    const output = (text: string) => ({ model: "m", input: [{ type: "function_call_output", call_id: "c1", output: text }] }) as ResponsesRequest;
    const sse = output('data: {"ok":1}\n\n');
    expect(mediaOf(sse.input)).toEqual({ count: 0, chars: 0, unhashed: 0 });
    expect(responsesFingerprint(sse, opts)).toHaveLength(responsesFingerprint(output('xata: {"ok":1}\n\n'), opts).length);
  });

  it("takes a Responses item's text for text, however it begins: a tool's output after data:,, a call's arguments, a field named data (found by review: 40k characters were one image's 64 blocks)", () => {
    const text = "revenue grew in every region ".repeat(100);
    const routedItems = (input: unknown[]) => {
      const chain = responsesFingerprint({ model: "m", input } as ResponsesRequest, opts);
      return { chain: chain.length, blocks: promptBlocks(chain, Buffer.byteLength(JSON.stringify(input)), opts, false, mediaOf(input)), media: mediaOf(input).count };
    };
    const forms = (lead: string) => [
      [{ type: "function_call_output", call_id: "c1", output: lead + text }],
      [{ type: "function_call", call_id: "c1", name: "f", arguments: lead + text }],
      [{ type: "function_call_output", call_id: "c1", output: "ok", data: lead + text }],
    ];
    const plain = forms("xata:,").map(routedItems);
    const disguised = forms("data:,").map(routedItems);
    expect(disguised).toEqual(plain);
    for (const { chain, media } of disguised) {
      expect(chain).toBeGreaterThan(text.length / opts.blockChars);
      expect(media).toBe(0);
    }
    // An image among a tool's output parts is media, at its place in an input_image part.
    const shown = [{ type: "function_call_output", call_id: "c1", output: [{ type: "input_image", image_url: photo(300_000) }] }];
    expect(routedItems(shown).media).toBe(1);
    expect(routedItems(shown).chain).toBeLessThanOrEqual(MEDIA_CHARS / opts.blockChars + 3);
  });

  it("counts a tool's output given as one image part, not a list, as media: a computer call's screenshot, a function's input_image (found by review: a 1 MB screenshot was 17,190 blocks, not 67)", () => {
    const shot = photo(1_000_000);
    const routedItem = (item: Record<string, unknown>) => {
      const input = [{ role: "user", content: "click the button" }, item];
      const chain = responsesFingerprint({ model: "m", input } as ResponsesRequest, opts);
      return { chain: chain.length, blocks: promptBlocks(chain, Buffer.byteLength(JSON.stringify(input)), opts, false, mediaOf(input)), media: mediaOf(input) };
    };
    const one = MEDIA_CHARS / opts.blockChars;
    for (const output of [{ type: "computer_screenshot", image_url: shot }, { type: "input_image", image_url: shot }]) {
      for (const type of ["computer_call_output", "function_call_output"]) {
        const { chain, blocks, media } = routedItem({ type, call_id: "c1", output });
        expect(media, `${type} ${output.type}`).toEqual({ count: 1, chars: shot.length, unhashed: 0 });
        expect(blocks, `${type} ${output.type}`).toBe(chain);
        expect(chain, `${type} ${output.type}`).toBeLessThanOrEqual(one + 6);
      }
    }
    // The same screenshot hashes alike, another apart; an output that is text is text.
    const item = (image_url: string) => ({ type: "computer_call_output", call_id: "c1", output: { type: "computer_screenshot", image_url } });
    const fp = (image_url: string) => responsesFingerprint({ model: "m", input: [item(image_url)] } as ResponsesRequest, opts);
    expect(fp(shot)).toEqual(fp(shot.slice()));
    expect(fp(photo(1_000_000, 2)).at(-1)).not.toBe(fp(shot).at(-1));
    const text = routedItem({ type: "function_call_output", call_id: "c1", output: `data:,${"revenue grew ".repeat(500)}` });
    expect(text.media.count).toBe(0);
    expect(text.chain).toBeGreaterThan(("revenue grew ".length * 500) / opts.blockChars);
  });

  it("sizes SGLang's bare base64 in a URL field as one image, as its data URL is, and keeps a short URL hashed as written (found by review: a 75 KB PNG sent bare was 1,564 blocks, as a data URL 65)", () => {
    const png = base64(100_000, 6);
    const bare = routed(asked(png));
    const dataUrl = routed(asked(`data:image/png;base64,${png}`));
    expect(bare.blocks).toBe(bare.chain.length);
    expect(bare.chain.length).toBe(dataUrl.chain.length);
    expect(mediaOf(asked(png).messages)).toEqual({ count: 1, chars: png.length, unhashed: 0 });
    // vLLM's untyped part and the Responses API's input_image, a bare string, alike.
    const untyped = [{ role: "user", content: [{ image_url: png }] }];
    expect(chatFingerprint(chat(untyped as ChatCompletionRequest["messages"]), opts).length).toBeLessThanOrEqual(MEDIA_CHARS / opts.blockChars + 3);
    expect(responsesFingerprint({ model: "m", input: [{ role: "user", content: [{ type: "input_image", image_url: png }] }] } as ResponsesRequest, opts).length).toBeLessThanOrEqual(MEDIA_CHARS / opts.blockChars + 3);
    // The same payload hashes alike, another apart.
    expect(chatFingerprint(asked(png), opts)).toEqual(chatFingerprint(asked(png.slice()), opts));
    expect(chatFingerprint(asked(base64(100_000, 7)), opts).at(-1)).not.toBe(chatFingerprint(asked(png), opts).at(-1));
    // A URL, or a path SGLang opens, is no payload: hashed as written, however long.
    const signed = `https://cdn.example.com/p.png?sig=${png.slice(0, 6000)}`;
    expect(mediaOf(asked(signed).messages).unhashed).toBe(0);
    expect(routed(asked(signed)).chain.length).toBeGreaterThan(6000 / opts.blockChars);
    expect(routed(asked(`/srv/images/2026-05-01/${png.slice(0, 6000)}.png`)).chain.length).toBeGreaterThan(6000 / opts.blockChars);
    expect(mediaOf(asked("https://cdn.example.com/p.png").messages)).toEqual({ count: 1, chars: 29, unhashed: MEDIA_CHARS - 29 });
  });

  it("counts as media only what sits in a media field: a data URL under image_url's url, base64 under input_audio's data or a file's file_data", () => {
    const payload = base64(100_000, 5);
    const parts = (fields: Record<string, unknown>) => [{ role: "user", content: [{ type: "x", ...fields }] }];
    const media = [{ image_url: { url: `data:image/png;base64,${payload}` } }, { image_url: `data:image/png;base64,${payload}` }, { input_audio: { data: payload } }, { file: { file_data: payload } }, { file_data: payload }];
    for (const fields of media) expect(mediaOf(parts(fields)).count, JSON.stringify(Object.keys(fields))).toBe(1);
    const text = [{ data: payload }, { b64_json: payload }, { detail: `data:,${payload}` }, { image_url: { data: payload } }, { input_audio: { url: payload } }];
    for (const fields of text) {
      expect(mediaOf(parts(fields)).count, JSON.stringify(fields).slice(0, 40)).toBe(0);
      expect(chatFingerprint(chat(parts(fields) as ChatCompletionRequest["messages"]), opts).length).toBeGreaterThan(payload.length / opts.blockChars);
    }
  });

  it("sizes an image, video, audio or file sent by URL as one sent inline, its URL hashed as written (found by review: 20 image URLs were 24 blocks, inline 1,294)", () => {
    const images = (url: (i: number) => string) => chat([{ role: "user", content: [{ type: "text", text: "describe" }, ...Array.from({ length: 20 }, (_, i) => ({ type: "image_url", image_url: { url: url(i) } }))] }]);
    const byUrl = routed(images((i) => `https://cdn.example.com/p${i}.png`));
    const inline = routed(images((i) => photo(50_000 + i, i)));
    // Each image is MEDIA_CHARS however it is sent: an engine spends its tokens on either.
    expect(byUrl.blocks).toBeGreaterThanOrEqual(inline.blocks - 20);
    expect(byUrl.blocks).toBeLessThanOrEqual(inline.blocks);
    // The chain is the URLs' own: the same URL, the same prefix.
    expect(byUrl.chain.length).toBeLessThan(40);
    expect(mediaOf(images((i) => `https://cdn.example.com/p${i}.png`).messages).count).toBe(20);
    // Every form a URL names media in: chat's video_url, audio_url, vLLM's untyped part, Responses' input_image and input_file.
    const one = MEDIA_CHARS / opts.blockChars;
    const forms = [
      chat([{ role: "user", content: [{ type: "video_url", video_url: { url: "https://cdn.example.com/v.mp4" } }] }]).messages,
      chat([{ role: "user", content: [{ type: "audio_url", audio_url: { url: "https://cdn.example.com/a.wav" } }] }]).messages,
      chat([{ role: "user", content: [{ image_url: "https://cdn.example.com/p.png" }] }]).messages,
      [{ role: "user", content: [{ type: "input_image", image_url: "https://cdn.example.com/p.png", detail: "auto" }] }],
      [{ role: "user", content: [{ type: "input_file", file_url: "https://cdn.example.com/a.pdf" }] }],
    ];
    for (const turns of forms) {
      const chain = responsesFingerprint({ model: "m", input: turns } as ResponsesRequest, opts);
      const blocks = promptBlocks(chain, Buffer.byteLength(JSON.stringify(turns)), opts, false, mediaOf(turns));
      expect(blocks).toBeGreaterThanOrEqual(one);
      expect(blocks).toBeLessThanOrEqual(one + 3);
    }
  });

  it("leaves the media's bytes out of a cut chain's size, and counts each as the chain does", () => {
    const o = { blockChars: 64, maxBlocks: 16 };
    const body = chat([{ role: "user", content: [{ type: "text", text: "x".repeat(64 * 40) }, { type: "image_url", image_url: { url: photo(1_000_000) } }] }]);
    const { chain, blocks } = routed(body, o);
    expect(chain).toHaveLength(16);
    // ~40 blocks of text, the image's MEDIA_CHARS, and the JSON around them; not its 15,600 blocks of base64.
    expect(blocks).toBeGreaterThanOrEqual(40 + MEDIA_CHARS / 64);
    expect(blocks).toBeLessThan(40 + MEDIA_CHARS / 64 + 4);
    expect(mediaOf(body.messages)).toEqual({ count: 1, chars: 1_000_000 + "data:image/jpeg;base64,".length, unhashed: 0 });
  });
});

describe("a completions batch's size in blocks", () => {
  const o = { blockChars: 64, maxBlocks: 2048 };
  /** The prompt as the gateway routes a completions body (workers/gateway/validate.ts): its chain, and its size in blocks. */
  const routed = (body: CompletionRequest) => {
    const chain = completionFingerprint(body, o);
    return { chain, blocks: promptBlocks(chain, Buffer.byteLength(JSON.stringify(body)), o, isPromptBatch(body)) };
  };

  it("is the body's bytes over blockChars, not its first prompt's blocks alone", () => {
    const texts = Array.from({ length: 1000 }, (_, i) => `Summarise ticket ${i}: the printer on floor ${i % 7} is jammed again.`);
    const batch = routed({ model: "m", prompt: texts });
    expect(batch.chain).toEqual(routed({ model: "m", prompt: texts[0] }).chain);
    expect(batch.chain.length).toBeLessThanOrEqual(2);
    // ~64 KB of prompts: its backend prefills a thousand of them, not the first one's blocks.
    expect(batch.blocks).toBe(Math.floor(Buffer.byteLength(JSON.stringify({ model: "m", prompt: texts })) / 64));
    expect(batch.blocks).toBeGreaterThan(900);
  });

  it("counts token-id lists alike, and a lone prompt or id list by its chain", () => {
    const ids = Array.from({ length: 500 }, () => Array.from({ length: 40 }, (_, i) => 1000 + i));
    expect(routed({ model: "m", prompt: ids }).blocks).toBeGreaterThan(500);
    expect(routed({ model: "m", prompt: [ids[0] as number[]] }).blocks).toBe(routed({ model: "m", prompt: ids[0] }).chain.length);
    expect(routed({ model: "m", prompt: ["only one"] }).blocks).toBe(1);
    // Two short prompts fit in a block of bytes, and are still more than the first one's chain.
    expect(routed({ model: "m", prompt: ["one", "two"] }).blocks).toBe(2);
    const lone = routed({ model: "m", prompt: "x".repeat(1000) });
    expect(lone.blocks).toBe(lone.chain.length);
    expect(lone.blocks).toBeLessThan(Math.floor(1000 / 64) + 2);
  });
});

describe("a Responses follow-up's size in blocks", () => {
  /** The prompt as the Worker routes a Responses body (workers/gateway/validate.ts): its chain, and its size in blocks. */
  const routed = (body: ResponsesRequest) => {
    const chain = responsesFingerprint(body, opts);
    return { chain, blocks: promptBlocks(chain, Buffer.byteLength(JSON.stringify(body)), opts, isFollowUp(body), mediaOf(body.input)) };
  };

  it("is more than its chain, which hashes its input alone: the engine prefills the stored conversation first", () => {
    const followUp = routed({ model: "m", input: "And then?", previous_response_id: "resp_1" });
    expect(followUp.chain).toEqual(routed({ model: "m", input: "And then?" }).chain);
    expect(followUp.blocks).toBe(followUp.chain.length + 1);
    const long = routed({ model: "m", input: "x".repeat(10_000), previous_response_id: "resp_1" });
    expect(long.blocks).toBeGreaterThan(long.chain.length);
  });

  it("is its chain's length for a fresh request, and for one that sets previous_response_id to null", () => {
    for (const previous of [undefined, null]) {
      const fresh = routed({ model: "m", input: "And then?", ...(previous === null ? { previous_response_id: null } : {}) });
      expect(fresh.blocks).toBe(fresh.chain.length);
    }
  });
});

describe("text a chat's template renders that the chain does not read", () => {
  /** The prompt as the Worker routes a chat body (workers/gateway/validate.ts): its chain, and its size in blocks. */
  const routed = (body: Record<string, unknown>) => {
    const chat = body as ChatCompletionRequest;
    const chain = chatFingerprint(chat, opts);
    return { chain, blocks: promptBlocks(chain, Buffer.byteLength(JSON.stringify(body)), opts, false, mediaOf(chat.messages), unreadChars(chat)) };
  };
  const doc = "lorem ipsum ".repeat(20_000); // 240 KB: ~3,750 blocks
  const docBlocks = Math.floor(doc.length / opts.blockChars);
  const hi = [{ role: "user", content: "hi" }];

  it("sizes a prompt by all it carries: vLLM's documents, chat_template_kwargs, an assistant's reasoning (found by review: 1.2 MB of documents beside 'hi' was 1 block)", () => {
    const plain = routed({ model: "g", messages: hi });
    const asked = [
      { model: "g", messages: hi, documents: [{ title: "t", text: doc }] },
      { model: "g", messages: hi, chat_template_kwargs: { enable_thinking: true, context: doc } },
      ...["reasoning_content", "reasoning"].map((field) => ({
        model: "g",
        messages: [...hi, { role: "assistant", content: null, [field]: doc, tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{}" } }] }, { role: "tool", tool_call_id: "c", content: "ok" }],
      })),
    ];
    for (const body of asked) {
      const prompt = routed(body);
      expect(prompt.blocks).toBeGreaterThanOrEqual(docBlocks);
      expect(prompt.blocks).toBeLessThan(docBlocks + 16);
      // Not hashed: the chain is the messages' alone.
      expect(prompt.chain.length).toBeLessThan(8);
    }
    expect(routed({ model: "g", messages: hi, documents: [{ title: "t", text: doc }] }).chain).toEqual(plain.chain);
  });

  it("leaves a prompt's size as its chain's when those fields are short or absent: a template's switch is no prompt", () => {
    const plain = routed({ model: "g", messages: hi });
    expect(routed({ model: "g", messages: hi, chat_template_kwargs: { enable_thinking: false } })).toEqual(plain);
    expect(routed({ model: "g", messages: hi, documents: null })).toEqual(plain);
  });
});
