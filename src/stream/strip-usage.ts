import type { ChunkTransform } from "../hooks/types.ts";
import { EventAligner } from "./sse-boundary.ts";

const QUOTE = 0x22;
const USAGE = new TextEncoder().encode('"usage"');
const encoder = new TextEncoder();
const decoder = new TextDecoder();

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
function isUsageEvent(event: string): boolean {
  const data = event
    .split(/\r?\n/)
    .filter((l) => l.startsWith("data:"))
    .map((l) => l.slice(5).trimStart())
    .join("\n");
  try {
    const j = JSON.parse(data) as { choices?: unknown; usage?: unknown };
    return Array.isArray(j.choices) && j.choices.length === 0 && typeof j.usage === "object" && j.usage !== null;
  } catch {
    return false;
  }
}

/** `continuing`: the bytes open with the rest of an event passed on in part, which is kept. */
function dropUsageEvents(bytes: Uint8Array, continuing: boolean): Uint8Array {
  const events = decoder.decode(bytes).split(/(?<=\n\r?\n)/);
  const kept = events.filter((e, i) => (continuing && i === 0) || !isUsageEvent(e));
  return kept.length === events.length ? bytes : encoder.encode(kept.join(""));
}

/**
 * Takes out of an SSE stream the usage event the gateway asked the upstream for
 * (`stream_options.include_usage`) when the client did not: the client gets the stream it asked
 * for, and the gateway reads the usage from the upstream's bytes all the same. Per chunk it looks
 * for a usage object in the bytes; only the chunk that has one is decoded.
 */
export class UsageEventStripper implements ChunkTransform {
  private readonly aligner = new EventAligner();

  transform(chunk: Uint8Array): Uint8Array {
    const continuing = this.aligner.midEvent;
    const whole = this.aligner.take(chunk);
    return whole.length > 0 && hasUsageObject(whole) ? dropUsageEvents(whole, continuing) : whole;
  }

  flush(): Uint8Array | null {
    const continuing = this.aligner.midEvent;
    const rest = this.aligner.flush();
    return rest && hasUsageObject(rest) ? dropUsageEvents(rest, continuing) : rest;
  }
}
