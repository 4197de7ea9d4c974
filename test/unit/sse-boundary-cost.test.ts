import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { EVENT_HOLD_MAX_BYTES, EventAligner } from "../../src/stream/sse-boundary.ts";
import { UsageEventStripper } from "../../src/stream/strip-usage.ts";
import { readFirstBytes } from "../../src/stream/first-bytes.ts";

/**
 * What holding an unfinished event costs, counted in bytes copied: every copy the aligner and the
 * usage stripper make goes through bytes.ts's join or a Uint8Array's slice, both counted here.
 */
const copied = vi.hoisted(() => ({ bytes: 0 }));
vi.mock("../../src/stream/bytes.ts", async (actual) => {
  const real = await actual<typeof import("../../src/stream/bytes.ts")>();
  const counted = <F extends (...args: never[]) => Uint8Array>(f: F): F =>
    ((...args: Parameters<F>) => {
      const out = f(...args);
      copied.bytes += out.length;
      return out;
    }) as F;
  return Object.fromEntries(Object.entries(real).map(([name, f]) => [name, typeof f === "function" ? counted(f as (...args: never[]) => Uint8Array) : f]));
});

const enc = new TextEncoder();
const realSlice = Uint8Array.prototype.slice;

beforeEach(() => {
  copied.bytes = 0;
  // A slice is a copy too.
  Uint8Array.prototype.slice = function (this: Uint8Array, ...args: [number?, number?]) {
    const out = realSlice.apply(this, args);
    copied.bytes += out.length;
    return out;
  };
});
afterEach(() => {
  Uint8Array.prototype.slice = realSlice;
});

/** One event of `kib` KiB in 4 KiB chunks, its end in the last, and the next event's start after it. */
function bigEvent(kib: number): Uint8Array[] {
  const chunks = [enc.encode('data: {"choices":[{"delta":{"content":"')];
  for (let i = 0; i < kib / 4; i++) chunks.push(new Uint8Array(4096).fill(0x78));
  chunks.push(enc.encode('"}}]}\n\ndata: {"choices":[{"del'));
  return chunks;
}

describe("an event that comes in many chunks is copied once, not once a chunk", () => {
  const takers: [string, () => (c: Uint8Array) => Uint8Array][] = [
    [
      "the aligner",
      () => {
        const a = new EventAligner();
        return (c) => a.take(c);
      },
    ],
    [
      "the usage stripper",
      () => {
        const s = new UsageEventStripper();
        return (c) => s.transform(c);
      },
    ],
  ];

  it.each(takers)("%s", (_name, make) => {
    const chunks = bigEvent(512);
    let size = 0;
    for (const c of chunks) size += c.length;
    const take = make();
    let out = 0;
    for (const c of chunks) out += take(c).length;
    expect(out).toBeGreaterThan(512 * 1024);
    // Joined once when its end came, and the next event's start copied once: about the event's size, not a chunk's times the chunks.
    expect(copied.bytes).toBeLessThanOrEqual(2 * size);
  });
});

describe("comments before a stream's first event (a proxy's keep-alives)", () => {
  const comment = enc.encode(": keep-alive, the request is queued\n\n");
  const event = 'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n';

  function commentsThenEvent(n: number): ReadableStream<Uint8Array> {
    let i = 0;
    return new ReadableStream<Uint8Array>({
      pull(c) {
        if (i++ < n) c.enqueue(comment);
        else {
          c.enqueue(enc.encode(event));
          c.close();
        }
      },
    });
  }

  it("are copied once, not once a comment, and go out with the first event", async () => {
    const first = await readFirstBytes(commentsThenEvent(1000), () => 0, true);
    const text = new TextDecoder().decode(first?.chunk);
    expect(text).toBe(new TextDecoder().decode(comment).repeat(1000) + event);
    expect(copied.bytes).toBeLessThanOrEqual(2 * text.length);
  });

  it("are held up to EVENT_HOLD_MAX_BYTES: an upstream that sends them without end cannot fill the isolate's memory", async () => {
    // ~2.3 MiB of comments.
    const n = Math.ceil((2.2 * EVENT_HOLD_MAX_BYTES) / comment.length);
    const first = await readFirstBytes(commentsThenEvent(n), () => 0, true);
    const text = new TextDecoder().decode(first?.chunk);
    expect(text.length).toBeLessThanOrEqual(EVENT_HOLD_MAX_BYTES + comment.length + event.length + 1);
    expect(text.endsWith(event)).toBe(true);
    // What was kept is whole lines, so the event after them is an event, not a comment's continuation.
    const events = text.split("\n\n").filter((e) => e.trim() !== "");
    expect(events.at(-1)).toBe(event.trimEnd());
    expect(events.slice(0, -1).every((e) => e.split(/\n/).every((line) => line === "" || line.startsWith(":")))).toBe(true);
  });
});
