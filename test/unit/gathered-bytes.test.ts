import { describe, expect, it } from "vitest";
import { GatheredBytes } from "../../src/stream/gathered-bytes.ts";

/** A chunk as workerd hands one over: `text`'s bytes at the start of a 4 KiB store of its own. */
function runtimeChunk(text: string): Uint8Array {
  const bytes = new TextEncoder().encode(text);
  const store = new Uint8Array(4096);
  store.set(bytes);
  return store.subarray(0, bytes.length);
}

const text = (bytes: Uint8Array) => new TextDecoder().decode(bytes);

describe("GatheredBytes: a stream's chunks gathered without keeping them", () => {
  it("keeps a lone chunk as it came, uncopied", () => {
    const chunk = runtimeChunk("{}");
    const gathered = new GatheredBytes();
    gathered.push(chunk);
    expect(gathered.bytes()).toBe(chunk);
  });

  it("copies chunks into one buffer of its own, in order, keeping no chunk's store", () => {
    const chunks = Array.from("a byte per chunk, ten thousand times over ".repeat(250), runtimeChunk);
    const gathered = new GatheredBytes();
    for (const chunk of chunks) gathered.push(chunk);
    const bytes = gathered.bytes();
    expect(text(bytes)).toBe("a byte per chunk, ten thousand times over ".repeat(250));
    expect(gathered.length).toBe(bytes.length);
    const stores = new Set(chunks.map((c) => c.buffer));
    expect(stores.has(bytes.buffer)).toBe(false);
    // Doubling: the buffer is at most twice what it holds (or its first 4 KiB), never a store per byte.
    expect(bytes.buffer.byteLength).toBeLessThanOrEqual(Math.max(2 * bytes.length, 4096) * 2);
  });

  it("never writes into a chunk it kept as it came", () => {
    const first = runtimeChunk("ab");
    const gathered = new GatheredBytes();
    gathered.push(first);
    gathered.push(runtimeChunk("cd"));
    expect(text(gathered.bytes())).toBe("abcd");
    expect(text(first)).toBe("ab");
    expect(first.buffer.byteLength).toBe(4096);
    expect(new Uint8Array(first.buffer)[2]).toBe(0);
  });

  it("keeps at most its cap, and counts what came past it", () => {
    const gathered = new GatheredBytes(5);
    for (const piece of ["abc", "def", "ghi"]) gathered.push(runtimeChunk(piece));
    expect(text(gathered.bytes())).toBe("abcde");
    expect(gathered.length).toBe(9);
    expect(gathered.bytes().buffer.byteLength).toBe(5);
  });

  it("drops everything at clear, and starts again", () => {
    const gathered = new GatheredBytes();
    gathered.push(runtimeChunk("abc"));
    gathered.push(runtimeChunk("def"));
    gathered.clear();
    expect(gathered.length).toBe(0);
    expect(gathered.bytes().length).toBe(0);
    gathered.push(runtimeChunk("g"));
    gathered.push(runtimeChunk("h"));
    expect(text(gathered.bytes())).toBe("gh");
  });
});
