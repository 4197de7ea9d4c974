import type { ChunkTransform } from "../hooks/types.ts";
import { join } from "./bytes.ts";
import { beforeNext, EventAligner, eventEnds, eventFields, type Before } from "./sse-boundary.ts";

const QUOTE = 0x22;
const LF = 0x0a;
const CR = 0x0d;
const USAGE = new TextEncoder().encode('"usage"');
const encoder = new TextEncoder();

function isJsonSpace(b: number | undefined): boolean {
  return b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d;
}

/** Whether the bytes hold `"usage"` with an object for its value (not the `"usage":null` vLLM puts on every chunk). */
export function hasUsageObject(bytes: Uint8Array): boolean {
  for (let i = bytes.indexOf(QUOTE); i >= 0; i = bytes.indexOf(QUOTE, i + 1)) {
    let k = 0;
    while (k < USAGE.length && bytes[i + k] === USAGE[k]) k++;
    if (k < USAGE.length) continue;
    let j = i + k;
    while (isJsonSpace(bytes[j])) j++;
    if (bytes[j] !== 0x3a) continue;
    j++;
    while (isJsonSpace(bytes[j])) j++;
    if (bytes[j] === 0x7b) return true;
  }
  return false;
}

/** An event that only reports usage: `choices` empty and `usage` set, as include_usage adds before [DONE]. */
function isUsageEvent(event: Uint8Array): boolean {
  const { data } = eventFields(event);
  if (data === null) return false;
  try {
    const j = JSON.parse(data) as { choices?: unknown; usage?: unknown };
    return Array.isArray(j.choices) && j.choices.length === 0 && typeof j.usage === "object" && j.usage !== null;
  } catch {
    return false;
  }
}

/**
 * `bytes` without its usage events, and whether the last one taken out ended it at a CR (whose LF
 * may come next). `before`: the two bytes before it in the stream, where its events' ends are read
 * from; `continuing`: it opens with the rest of an event passed on in part, which is kept.
 */
function dropUsageEvents(bytes: Uint8Array, before: Before, continuing: boolean): { kept: Uint8Array; droppedAtCr: boolean } {
  const kept: Uint8Array[] = [];
  let start = 0;
  let droppedAtCr = false;
  for (const end of [...eventEnds(bytes, before), bytes.length]) {
    if (end === start) continue;
    const event = bytes.subarray(start, end);
    const usage = !(continuing && start === 0) && hasUsageObject(event) && isUsageEvent(event);
    if (!usage) kept.push(event);
    droppedAtCr = usage && bytes[end - 1] === CR;
    start = end;
  }
  return { kept: kept.length === 1 ? (kept[0] as Uint8Array) : join(kept), droppedAtCr };
}

/**
 * Takes out of an SSE stream the usage event the gateway asked the upstream for
 * (`stream_options.include_usage`) when the client did not: the client gets the stream it asked
 * for, and the gateway reads the usage from the upstream's bytes all the same. Per chunk it looks
 * for a usage object in the bytes; only the chunk that has one is decoded.
 */
export class UsageEventStripper implements ChunkTransform {
  private readonly aligner = new EventAligner();
  /** The last two bytes the aligner let out: where the next bytes' first event end is read from. */
  private before: Before = 0;
  /** The last event taken out ended at a CR: an LF next is its line end's second half, taken out too. */
  private droppedAtCr = false;

  transform(chunk: Uint8Array): Uint8Array {
    const continuing = this.aligner.midEvent;
    return this.strip(this.aligner.take(chunk), continuing);
  }

  flush(): Uint8Array | null {
    const continuing = this.aligner.midEvent;
    const rest = this.aligner.flush();
    return rest && this.strip(rest, continuing);
  }

  private strip(whole: Uint8Array, continuing: boolean): Uint8Array {
    if (whole.length === 0) return whole;
    let before = this.before;
    this.before = beforeNext(before, whole);
    let bytes = whole;
    if (this.droppedAtCr && bytes[0] === LF) {
      before = beforeNext(before, bytes.subarray(0, 1));
      bytes = bytes.subarray(1);
    }
    this.droppedAtCr = false;
    if (!hasUsageObject(bytes)) return bytes;
    const stripped = dropUsageEvents(bytes, before, continuing);
    this.droppedAtCr = stripped.droppedAtCr;
    return stripped.kept;
  }
}
