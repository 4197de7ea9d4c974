import { describe, expect, it } from "vitest";
import { sseEvents } from "../../pages/playground/sse-events.js";

/**
 * The playground's SSE reader (the page's own, in browser JavaScript), fed a stream in each
 * framing SSE allows cut into chunks everywhere, a CRLF split between its CR and its LF included:
 * the same events' data, however the stream is cut. The page's browser tests
 * (test/e2e/pages-failures.test.ts) read a lone-CR stream and a cut CRLF through the gateway.
 */

const first = 'data: {"choices":[{"delta":{"content":"hi"}}]}';
// One event's data in two lines, as a JSON document may be broken; a comment and a field the page does not read.
const second = [": a comment", "event: message", 'data: {"choices":[{"delta":', 'data:{"content":" there"}}]}'];
const done = "data: [DONE]";
const DATA = ['{"choices":[{"delta":{"content":"hi"}}]}', '{"choices":[{"delta":\n{"content":" there"}}]}', "[DONE]"];

const FRAMINGS: [string, string][] = [
  ["LF", "\n"],
  ["CRLF", "\r\n"],
  ["CR", "\r"],
];

const framed = (eol: string): string => [[first], second, [done]].map((lines) => lines.map((l) => l + eol).join("") + eol).join("");

/** The data of every event in `chunks`, read in order. */
function read(chunks: string[]): string[] {
  const events = sseEvents();
  return chunks.flatMap((c) => events.push(c));
}

describe.each(FRAMINGS)("%s line endings", (_name, eol) => {
  const text = framed(eol);

  it("read whole, each event's data", () => {
    expect(read([text])).toEqual(DATA);
  });

  it("cut into two chunks anywhere, or into a chunk a character, the same", () => {
    for (let i = 1; i < text.length; i++) expect(read([text.slice(0, i), "", text.slice(i)]), `cut at ${i}`).toEqual(DATA);
    expect(read([...text])).toEqual(DATA);
  });
});

it("an event ended by a lone CR is given at once, not when the next chunk shows whether an LF follows", () => {
  const events = sseEvents();
  expect(events.push(`${first}\r\r`)).toEqual([DATA[0]]);
  expect(events.push(`\n${done}\r\n\r\n`)).toEqual(["[DONE]"]);
});

it("says how long the event not yet ended is, its lines and its unended line, and nothing once it ends", () => {
  const events = sseEvents();
  events.push(`${first}\n\n: a comment\r\n`);
  expect(events.unfinishedLength()).toBe(": a comment\r\n".length);
  events.push("data: xx");
  events.push("x".repeat(1000));
  expect(events.unfinishedLength()).toBe(": a comment\r\n".length + "data: xx".length + 1000);
  events.push("\r");
  expect(events.unfinishedLength()).toBe(": a comment\r\n".length + "data: xx".length + 1001);
  expect(events.push("\n\n")).toEqual([`xx${"x".repeat(1000)}`]);
  expect(events.unfinishedLength()).toBe(0);
});
