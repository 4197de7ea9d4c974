import { describe, expect, it } from "vitest";
import { cacheSaltOf, saltedChain } from "../../src/prefix/cache-salt.ts";
import { chatFingerprint } from "../../src/prefix/fingerprint.ts";

const opts = { blockChars: 64, maxBlocks: 64 };
const turns = (n: number) => Array.from({ length: n }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `turn ${i}: ${"words ".repeat(30)}` }));
const chainOf = (n: number) => chatFingerprint({ model: "m", messages: turns(n) }, opts);

describe("cacheSaltOf", () => {
  it("is null for a body with neither field (or empty ones)", () => {
    expect([cacheSaltOf({}), cacheSaltOf({ cache_salt: "" }), cacheSaltOf({ cache_salt: 5, extra_key: null }), cacheSaltOf({ cache_salt: "", extra_key: "" })]).toEqual([null, null, null, null]);
  });

  it("joins the two fields as SGLang keys its cache, cache_salt then extra_key (found by review: three keys where SGLang has one)", () => {
    // SGLang's _compute_extra_key: "".join of the non-empty cache_salt and extra_key.
    const salts = [cacheSaltOf({ cache_salt: "ab" }), cacheSaltOf({ cache_salt: "a", extra_key: "b" }), cacheSaltOf({ extra_key: "ab" }), cacheSaltOf({ cache_salt: "ab", extra_key: "" })];
    expect(new Set(salts)).toEqual(new Set(["ab"]));
    expect(cacheSaltOf({ cache_salt: "b", extra_key: "a" })).not.toBe(cacheSaltOf({ cache_salt: "a", extra_key: "b" }));
  });
});

describe("saltedChain", () => {
  it("keeps a conversation's earlier hashes under one salt, as the unsalted chain does", () => {
    const short = saltedChain(chainOf(2), "s");
    const long = saltedChain(chainOf(4), "s");
    expect(long.slice(0, short.length)).toEqual(short);
  });

  it("shares no block with the prompt unsalted or under another salt", () => {
    const plain = chainOf(4);
    const a = saltedChain(plain, "tenant-a");
    const b = saltedChain(plain, "tenant-b");
    for (let i = 0; i < plain.length; i++) expect(new Set([plain[i], a[i], b[i]]).size).toBe(3);
  });

  it("gives hashes a route call carries as plain numbers: non-negative integers under 2^53", () => {
    for (const h of saltedChain(chainOf(4), "x")) expect(Number.isSafeInteger(h) && h >= 0).toBe(true);
  });
});
