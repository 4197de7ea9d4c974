import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { endOfLastEvent, EventAligner } from "../../src/stream/sse-boundary.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();

describe("where SSE events end", () => {
  it.each([
    ["data: a\n\n", 9],
    ["data: a\n\ndata: b", 9],
    ["data: a\r\n\r\ndata: b", 11],
    ["data: a\r\rdata: b", 9],
    ["data: a\n\r\ndata: b", 10],
    ["data: a\r\n\r", 10],
    ["data: a\r\ndata: b\r", 0],
    ["data: a\n", 0],
    ["data: a", 0],
    ["", 0],
    ["\n\n", 2],
  ])("%j → %i", (text, end) => {
    expect(endOfLastEvent(enc.encode(text))).toBe(end);
  });
});

describe("EventAligner", () => {
  // No CR in a value: SSE reads every CR as a line end (test/unit/sse-boundary-line-endings.test.ts).
  const events = fc.array(fc.string({ unit: fc.constantFrom("a", "é", "{", '"', ":", " ", "\t"), maxLength: 20 }).map((s) => `data: ${s}\n\n`), { minLength: 1, maxLength: 8 });

  it("passes on exactly the whole events, wherever the chunks are cut", () => {
    fc.assert(
      fc.property(events, fc.array(fc.nat(), { maxLength: 10 }), fc.boolean(), (evs, cuts, cutInside) => {
        const whole = enc.encode(evs.join(""));
        // Optionally lose the end of the last event, as a cut stream does.
        const sent = cutInside ? whole.subarray(0, whole.length - 3) : whole;
        const points = [...new Set(cuts.map((c) => c % (sent.length + 1)))].sort((a, b) => a - b);
        const aligner = new EventAligner();
        let out = "";
        let from = 0;
        for (const at of [...points, sent.length]) {
          const piece = aligner.take(sent.subarray(from, at));
          out += dec.decode(piece, { stream: true });
          expect(piece.length === 0 || endOfLastEvent(piece) === piece.length).toBe(true);
          from = at;
        }
        const complete = cutInside ? evs.slice(0, -1).join("") : evs.join("");
        expect(out).toBe(complete);
        expect(aligner.holding).toBe(cutInside);
      }),
    );
  });
});

describe("EventAligner: an event too large to hold", () => {
  const piece = new Uint8Array(4096).fill(0x78);
  const opening = enc.encode('data: {"choices":[{"delta":{"content":"');

  /** Takes an event's opening and `kib` KiB of its text in 4 KiB chunks, its end never coming; what went out before the stream ended. */
  function unended(kib: number): { out: number; aligner: EventAligner } {
    const aligner = new EventAligner();
    let out = aligner.take(enc.encode("data: {}\n\n")).length + aligner.take(opening).length;
    for (let i = 0; i < kib / 4; i++) out += aligner.take(piece).length;
    return { out, aligner };
  }

  it("passes an event with no end on as it comes once it outgrows what is held, instead of holding all of it", () => {
    const { out, aligner } = unended(4096);
    // All but what is held at most: the whole event a chunk at a time, not nothing until the stream ends.
    expect(out).toBeGreaterThanOrEqual(4096 * 1024 - 1024 * 1024);
    expect(aligner.midEvent).toBe(true);
    expect(aligner.holding).toBe(false);
  });

  it("holds a smaller one until its end, then passes on the events after it whole again", () => {
    const { out, aligner } = unended(256);
    expect(out).toBe(10);
    const end = aligner.take(enc.encode('"}}]}\n\ndata: [DO'));
    expect(dec.decode(end.subarray(end.length - 7))).toBe('"}}]}\n\n');
    expect(end.length).toBe(opening.length + 256 * 1024 + 7);
    expect(dec.decode(aligner.take(enc.encode("NE]\n\n")))).toBe("data: [DONE]\n\n");
  });

  it("after an event it passed on in part, aligns again from the next event's end", () => {
    const { aligner } = unended(2048);
    expect(aligner.take(enc.encode('"}}]}\n\ndata: [DO')).length).toBe(7);
    expect(aligner.midEvent).toBe(false);
    expect(aligner.holding).toBe(true);
    expect(dec.decode(aligner.take(enc.encode("NE]\n\n")))).toBe("data: [DONE]\n\n");
  });
});
