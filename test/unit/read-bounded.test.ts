import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { readBounded } from "../../src/upstream/read-bounded.ts";

// A full garbage collection on demand, to count what is still held (not what awaits collection).
setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

/**
 * An error body that comes a byte per chunk, each a view of a 4 KiB store of its own (as workerd
 * hands a 1-byte HTTP chunk over), and then waits until `end()`: what the reader holds of the
 * chunks read so far can be counted while it still reads.
 */
function drippedBody(bytes: number): { body: ReadableStream<Uint8Array>; stores: WeakRef<ArrayBuffer>[]; read: Promise<void>; end: () => void } {
  const stores: WeakRef<ArrayBuffer>[] = [];
  let sent = 0;
  let allRead!: () => void;
  const read = new Promise<void>((r) => (allRead = r));
  let end!: () => void;
  const ended = new Promise<void>((r) => (end = r));
  const body = new ReadableStream<Uint8Array>({
    async pull(c) {
      if (sent === bytes) {
        allRead();
        await ended;
        return c.close();
      }
      const store = new ArrayBuffer(4096);
      new Uint8Array(store)[0] = 0x78;
      stores.push(new WeakRef(store));
      sent++;
      c.enqueue(new Uint8Array(store, 0, 1));
    },
  });
  return { body, stores, read, end };
}

/** How many of `stores` are still reachable, after a full garbage collection. */
async function stillHeld(stores: readonly WeakRef<ArrayBuffer>[]): Promise<number> {
  // A WeakRef keeps its target until the task that made it ends: collect in a later one.
  await new Promise((r) => setTimeout(r, 0));
  gc();
  return stores.filter((s) => s.deref() !== undefined).length;
}

describe("readBounded of a body that comes a byte per chunk", () => {
  it("holds no chunk's store while it reads: each byte is copied out", async () => {
    const { body, stores, read, end } = drippedBody(6000);
    const text = readBounded(body, 8192, 60_000);
    await read;
    const held = await stillHeld(stores);
    end();
    expect(await text).toBe("x".repeat(6000));
    // Kept by reference, all 6,000 stores (24 MiB) were held until the read ended; copied, none
    // is but the first, kept as it came until a second came.
    expect(held).toBeLessThanOrEqual(1);
  });

  it("still stops at its byte bound", async () => {
    const { body, end } = drippedBody(10_000);
    const text = await readBounded(body, 8192, 60_000);
    end();
    expect(text).toBe("x".repeat(8192));
  });
});

describe("readBounded of a body that never ends", () => {
  it("stops at its time bound, with what came by then, and cancels the body", async () => {
    let cancelled = false;
    const body = new ReadableStream<Uint8Array>({
      start: (c) => c.enqueue(new TextEncoder().encode('{"error":')),
      cancel: () => void (cancelled = true),
    });
    expect(await readBounded(body, 8192, 50)).toBe('{"error":');
    expect(cancelled).toBe(true);
  });
});
