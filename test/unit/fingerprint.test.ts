import { describe, expect, it } from "vitest";
import { BlockHasher } from "../../src/prefix/block-hasher.ts";
import { chatFingerprint, completionFingerprint } from "../../src/prefix/fingerprint.ts";
import type { ChatCompletionRequest } from "../../src/openai/requests.ts";

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

  it("hashes tools ahead of the conversation", () => {
    const tools = [{ type: "function", function: { name: "lookup", parameters: {} } }];
    const withTools = chatFingerprint({ ...chat([{ role: "user", content: "x" }]), tools }, opts);
    const without = chatFingerprint(chat([{ role: "user", content: "x" }]), opts);
    expect(withTools.length).toBeGreaterThan(without.length);
    expect(withTools[0]).not.toBe(without[0]);
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
