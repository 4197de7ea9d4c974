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
    ["data: a\n", 0],
    ["data: a", 0],
    ["", 0],
    ["\n\n", 2],
  ])("%j → %i", (text, end) => {
    expect(endOfLastEvent(enc.encode(text))).toBe(end);
  });
});

describe("EventAligner", () => {
  const events = fc.array(fc.string({ unit: fc.constantFrom("a", "é", "{", '"', ":", " ", "\r"), maxLength: 20 }).map((s) => `data: ${s}\n\n`), { minLength: 1, maxLength: 8 });

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
