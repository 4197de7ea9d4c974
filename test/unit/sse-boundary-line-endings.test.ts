import { describe, expect, it } from "vitest";
import { EventAligner, EventCounter } from "../../src/stream/sse-boundary.ts";
import { UsageEventStripper } from "../../src/stream/strip-usage.ts";

/**
 * SSE ends a line with CRLF, LF or a lone CR, and an event with a blank line: two line ends in a
 * row, of any kind. The aligner and the usage stripper, fed a stream in each framing cut into
 * chunks everywhere (a CRLF split between its CR and its LF included).
 */

const enc = new TextEncoder();
const dec = new TextDecoder();

const role = ['data: {"id":"c1","choices":[{"index":0,"delta":{"role":"assistant"}}],"usage":null}'];
const token = ["event: message", 'data: {"id":"c1","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}],', 'data: "usage":null}'];
const usage = ['data: {"id":"c1","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}'];
const done = ["data: [DONE]"];

/** Each framing's line end for the four events in turn. */
const FRAMINGS: [string, string[]][] = [
  ["LF", ["\n", "\n", "\n", "\n"]],
  ["CRLF", ["\r\n", "\r\n", "\r\n", "\r\n"]],
  ["CR", ["\r", "\r", "\r", "\r"]],
  ["mixed", ["\r", "\n", "\r\n", "\r"]],
];

/** An event's lines, each ended by `eol`, and the blank line after them. */
const framed = (lines: string[], eol: string): string => lines.map((l) => l + eol).join("") + eol;

/**
 * Where a spec parser dispatches events in `text`: just past each blank line's end. Also the CR of
 * a blank line's CRLF, which ends that line whether its LF comes or not.
 */
function dispatchPoints(text: string): { ends: number[]; accepted: Set<number> } {
  const ends: number[] = [];
  const accepted = new Set<number>();
  let lineStart = 0;
  for (const m of text.matchAll(/\r\n|\r|\n/g)) {
    const at = m.index;
    if (at === lineStart) {
      ends.push(at + m[0].length);
      accepted.add(at + m[0].length).add(at + 1);
    }
    lineStart = at + m[0].length;
  }
  return { ends, accepted };
}

/** Every cut into two chunks, every run of one to three bytes as a chunk of its own, and a chunk per byte. */
function chunkings(bytes: Uint8Array): Uint8Array[][] {
  const out: Uint8Array[][] = [];
  for (let i = 1; i < bytes.length; i++) {
    out.push([bytes.subarray(0, i), bytes.subarray(i)]);
    for (let d = 1; d <= 3 && i + d < bytes.length; d++) out.push([bytes.subarray(0, i), bytes.subarray(i, i + d), bytes.subarray(i + d)]);
  }
  out.push(Array.from(bytes, (_, i) => bytes.subarray(i, i + 1)));
  return out;
}

describe.each(FRAMINGS)("%s line endings", (_name, eols) => {
  const [a, b, c, d] = eols as [string, string, string, string];
  const text = framed(role, a) + framed(token, b) + framed(usage, c) + framed(done, d);
  const bytes = enc.encode(text);
  const { ends, accepted } = dispatchPoints(text);

  it("the aligner passes on every event as soon as its blank line has come, and cuts nowhere else", () => {
    expect(ends).toHaveLength(4);
    for (const chunks of chunkings(bytes)) {
      const aligner = new EventAligner();
      let seen = 0;
      let out = 0;
      const pieces: Uint8Array[] = [];
      for (const c of chunks) {
        const piece = aligner.take(c);
        seen += c.length;
        out += piece.length;
        pieces.push(piece);
        // Every event whose blank line came is out: none waits for the stream's end.
        expect(out).toBeGreaterThanOrEqual(Math.max(0, ...ends.filter((e) => e <= seen)));
        if (piece.length > 0) expect([chunks.map((x) => x.length), out, accepted.has(out)]).toEqual([chunks.map((x) => x.length), out, true]);
      }
      expect(aligner.flush()).toBeNull();
      expect(dec.decode(Buffer.concat(pieces))).toBe(text);
    }
  });

  it("the event counter counts each event once, as soon as its blank line has come, wherever the chunks are cut", () => {
    for (const chunks of chunkings(bytes)) {
      const counter = new EventCounter();
      let seen = 0;
      for (const c of chunks) {
        counter.push(c);
        seen += c.length;
        // Every event whose blank line came is counted; one more only when its CRLF's CR has come and its LF not yet.
        const whole = ends.filter((e) => e <= seen).length;
        const atCr = ends.filter((e) => e <= seen + 1).length;
        expect([chunks.map((x) => x.length), counter.count >= whole && counter.count <= atCr]).toEqual([chunks.map((x) => x.length), true]);
      }
      expect([chunks.map((x) => x.length), counter.count]).toEqual([chunks.map((x) => x.length), 4]);
    }
  });

  it("the usage stripper takes out the usage event, and nothing else, wherever the chunks are cut", () => {
    const expected = framed(role, a) + framed(token, b) + framed(done, d);
    for (const chunks of chunkings(bytes)) {
      const s = new UsageEventStripper();
      const pieces = chunks.map((c) => s.transform(c));
      const rest = s.flush();
      if (rest) pieces.push(rest);
      expect([chunks.map((x) => x.length), dec.decode(Buffer.concat(pieces))]).toEqual([chunks.map((x) => x.length), expected]);
    }
  });
});

it("a line feed after a CR that ended an event belongs to that event, and never ends the next one", () => {
  const aligner = new EventAligner();
  // CRLF framing cut between a blank line's CR and its LF: the event is out at the CR.
  expect(dec.decode(aligner.take(enc.encode("data: a\r\n\r")))).toBe("data: a\r\n\r");
  // The LF goes out as the end of the event before; what follows it is held until its own blank line.
  expect(dec.decode(aligner.take(enc.encode("\ndata: b\r\n")))).toBe("\n");
  expect(dec.decode(aligner.take(enc.encode("\r\n")))).toBe("data: b\r\n\r\n");
  // A CRLF split inside an event's line is one line end, not two.
  expect(aligner.take(enc.encode("data: c\r")).length).toBe(0);
  expect(aligner.take(enc.encode("\ndata: d\r\n")).length).toBe(0);
  expect(dec.decode(aligner.flush() ?? new Uint8Array())).toBe("data: c\r\ndata: d\r\n");
});
