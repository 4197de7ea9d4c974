import { describe, expect, it } from "vitest";
import type { CompletionSummary } from "../../src/hooks/types.ts";
import { relay } from "../../src/stream/relay.ts";
import { JsonFieldRewriter } from "../../src/stream/restamp.ts";
import { UsageEventStripper } from "../../src/stream/strip-usage.ts";

/**
 * The JavaScript relay a group with restamp and a key that counts tokens runs (the usage event the
 * client did not ask for taken out, the model renamed), against an SSE parser written from the
 * spec: over seeded random streams — LF, CRLF and lone-CR line ends, comments, multi-line data,
 * named events, no blank line after the last, cut into 1–12 byte chunks, and an upstream dying at a
 * random chunk — the client's events are the upstream's, less the usage event, renamed; a cut
 * stream gives every whole event before the cut, none spliced, then one error event.
 */

interface SseEvent {
  event: string;
  data: string;
}

/** Events as an EventSource dispatches them (WHATWG HTML, "Interpreting an event stream"); a last event with no blank line after it is not dispatched. */
function parseEvents(text: string): SseEvent[] {
  const lines = text.split(/\r\n|\r|\n/);
  // What follows the last line end is an unfinished line: never dispatched.
  lines.pop();
  const out: SseEvent[] = [];
  let data: string[] | null = null;
  let event = "";
  for (const line of lines) {
    if (line === "") {
      if (data !== null) out.push({ event: event || "message", data: data.join("\n") });
      data = null;
      event = "";
      continue;
    }
    if (line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") (data ??= []).push(value);
    else if (field === "event") event = value;
  }
  return out;
}

/** A seeded generator (a linear congruential one): every run draws the same streams. */
function generator(seed: number): { next: () => number; pick: <T>(xs: readonly T[]) => T } {
  let s = seed;
  const next = () => {
    s = (s * 1103515245 + 12345) & 0x7fffffff;
    return s / 0x7fffffff;
  };
  return { next, pick: (xs) => xs[Math.floor(next() * xs.length)] as (typeof xs)[number] };
}

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A usage event of the shape include_usage asks for: no choices, a usage object. */
function isUsageEvent(e: SseEvent): boolean {
  try {
    const j = JSON.parse(e.data) as { choices?: unknown; usage?: unknown };
    return Array.isArray(j.choices) && j.choices.length === 0 && typeof j.usage === "object" && j.usage !== null;
  } catch {
    return false;
  }
}

/** What the client should read of upstream events: the usage event taken out, the model renamed. */
function asClientReads(events: SseEvent[]): SseEvent[] {
  return events.filter((e) => !isUsageEvent(e)).map((e) => ({ ...e, data: e.data.replaceAll('"model":"up"', '"model":"client"').replaceAll('"model": "up"', '"model": "client"') }));
}

interface Drawn {
  text: string;
  chunks: Uint8Array[];
  /** The last usage event's completion tokens; null when the stream has none. */
  completionTokens: number | null;
}

function drawStream(g: ReturnType<typeof generator>): Drawn {
  const lineEnd = () => g.pick(["\n", "\r\n", "\r"]);
  const fixed = g.next() < 0.5 ? lineEnd() : null;
  const eol = () => fixed ?? lineEnd();
  let text = "";
  let completionTokens: number | null = null;
  const n = 1 + Math.floor(g.next() * 6);
  for (let k = 0; k < n; k++) {
    const kind = g.pick(["token", "token", "usage", "comment", "multi-line", "named"] as const);
    if (kind === "comment") {
      text += ": ping" + eol() + (g.next() < 0.5 ? eol() : "");
      continue;
    }
    const lines =
      kind === "token"
        ? [`data: {"model":"up","choices":[{"delta":{"content":"t${k}"}}],"usage":null}`]
        : kind === "usage"
          ? [`data: {"model":"up","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":${k},"total_tokens":${3 + k}}}`]
          : kind === "multi-line"
            ? [`data: {"model":"up",`, `data: "choices":[{"delta":{}}]}`]
            : ["event: foo", `data: {"model": "up","choices":[{}]}`];
    if (kind === "usage") completionTokens = k;
    if (g.next() < 0.2) lines.unshift(": c");
    text += lines.map((l) => l + eol()).join("") + eol();
  }
  text += "data: [DONE]" + eol();
  // Most upstreams end on a blank line; some end on the [DONE] line's own end.
  if (g.next() < 0.7) text += eol();
  const bytes = enc.encode(text);
  const chunks: Uint8Array[] = [];
  for (let at = 0; at < bytes.length; ) {
    const len = 1 + Math.floor(g.next() * 12);
    chunks.push(bytes.slice(at, at + len));
    at += len;
  }
  return { text, chunks, completionTokens };
}

/** Relays `chunks` (erroring after them when `dies`) through the stripper and the restamp; what the client read, and the summary. */
async function relayed(chunks: Uint8Array[], dies: boolean): Promise<{ got: string; summary: CompletionSummary }> {
  let i = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(c) {
      if (i < chunks.length) c.enqueue(chunks[i++] as Uint8Array);
      else if (dies) c.error(new Error("connection reset"));
      else c.close();
    },
  });
  let summary: CompletionSummary | undefined;
  const out = relay(body, {
    transforms: [new UsageEventStripper(), new JsonFieldRewriter("model", "up", "client")],
    sse: true,
    sentAt: 0,
    now: () => 0,
    readUsage: true,
    onEnd: (s) => (summary = s),
  });
  let got = "";
  const reader = out.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    got += dec.decode(value, { stream: true });
  }
  if (!summary) throw new Error("the relay ended without its summary");
  return { got, summary };
}

describe("the JavaScript relay against the SSE spec, over random streams", () => {
  it("gives the client every event of a whole stream, less the usage event, renamed, and reads the usage", async () => {
    const g = generator(1);
    for (let n = 0; n < 400; n++) {
      const { text, chunks, completionTokens } = drawStream(g);
      const { got, summary } = await relayed(chunks, false);
      // Both ended as a client's parser ends them: a last event with no blank line after it counts.
      expect(parseEvents(got + "\n\n"), JSON.stringify(text)).toEqual(asClientReads(parseEvents(text + "\n\n")));
      expect(summary.outcome).toBe("ok");
      expect(summary.usage?.completionTokens ?? null, JSON.stringify(text)).toBe(completionTokens);
    }
  });

  it("gives the client of a stream its upstream cut every whole event before the cut, then one error event", async () => {
    const g = generator(2);
    for (let n = 0; n < 400; n++) {
      const { text, chunks } = drawStream(g);
      const cut = Math.floor(g.next() * chunks.length);
      const sent = chunks.slice(0, cut);
      const { got, summary } = await relayed(sent, true);
      const events = parseEvents(got);
      const before = asClientReads(parseEvents(dec.decode(new Uint8Array(sent.flatMap((c) => [...c])))));
      expect(events.slice(0, -1), JSON.stringify(text)).toEqual(before);
      expect(events.at(-1)?.data, JSON.stringify(text)).toContain("upstream_stream_error");
      expect(summary.outcome).toBe("upstream-error");
    }
  });
});
