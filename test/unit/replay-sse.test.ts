import { describe, expect, it } from "vitest";
import { SseScanner } from "../../bench/replay/index.ts";

function scan(chunks: readonly Buffer[], end = true): [string, string][] {
  const events: [string, string][] = [];
  const scanner = new SseScanner((event, data) => events.push([event, data]));
  for (const chunk of chunks) scanner.push(chunk);
  if (end) scanner.end();
  return events;
}

/** Every way of cutting `bytes` into two chunks, plus one chunk per byte. */
function cuts(bytes: Buffer): Buffer[][] {
  const out: Buffer[][] = [[bytes]];
  for (let i = 1; i < bytes.length; i++) out.push([bytes.subarray(0, i), bytes.subarray(i)]);
  out.push([...bytes].map((b) => Buffer.from([b])));
  return out;
}

describe("SSE scanner", () => {
  const stream = Buffer.from(
    ': keep-alive\n\ndata: {"a":"Grüße ✓"}\n\nevent: error\ndata: {"error":{"message":"boom"}}\n\n' +
      "data: line one\ndata: line two\nid: 7\nretry: 10\n\ndata:no-space\r\n\r\ndata: [DONE]\n\n",
  );
  const expected: [string, string][] = [
    ["message", '{"a":"Grüße ✓"}'],
    ["error", '{"error":{"message":"boom"}}'],
    ["message", "line one\nline two"],
    ["message", "no-space"],
    ["message", "[DONE]"],
  ];

  it("reads events wherever the chunks are cut, inside lines, CRLFs and UTF-8 characters", () => {
    for (const chunks of cuts(stream)) expect(scan(chunks)).toEqual(expected);
  });

  it("dispatches an event only at its blank line, and a last event without one when the stream ends", () => {
    expect(scan([Buffer.from("data: x\n")], false)).toEqual([]);
    expect(scan([Buffer.from("data: x\n")])).toEqual([["message", "x"]]);
    expect(scan([Buffer.from("data: x")])).toEqual([["message", "x"]]);
    expect(scan([Buffer.from("event: ping\n\n: comment\n\n")])).toEqual([]);
  });

  it("reads a line longer than many chunks", () => {
    const long = "x".repeat(100_000);
    const bytes = Buffer.from(`data: ${long}\n\n`);
    const chunks: Buffer[] = [];
    for (let o = 0; o < bytes.length; o += 1000) chunks.push(bytes.subarray(o, o + 1000));
    expect(scan(chunks)).toEqual([["message", long]]);
  });
});
