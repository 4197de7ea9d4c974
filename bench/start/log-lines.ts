/**
 * `npm start`'s view of the gateway's log: each JSON line the Worker writes (a request's, or an
 * event's: src/logging/) becomes one short line a person reads at a glance; wrangler dev's own
 * line per request is dropped (the Worker's says more), and every other line passes as it came.
 */

import { printable } from "../../src/control-characters.ts";

type Fields = Record<string, unknown>;

/** wrangler dev's request line, e.g. `[wrangler:info] POST /v1/chat/completions 200 OK (50ms)`. */
const WRANGLER_REQUEST = /^\[wrangler:info\] [A-Z]+ \S+ \d{3} /;

/** The line to show for one line of wrangler dev's output; null to show none. */
export function readableLogLine(line: string): string | null {
  if (WRANGLER_REQUEST.test(line)) return null;
  const at = line.indexOf("{");
  if (at < 0 || !line.includes('"type":')) return line;
  let f: Fields;
  try {
    f = JSON.parse(line.slice(at)) as Fields;
  } catch {
    return line;
  }
  // The path is the client's, decoded: a control character in it is written out, not sent to the terminal.
  if (f.type === "request") return `${clock(f.time)} ${printable(request(f))}`;
  if (f.type === "event") return `${clock(f.time)} ${printable(event(f))}`;
  return line;
}

function request(f: Fields): string {
  const parts: unknown[] = [f.status, endpoint(f.path)];
  if (f.group !== null) parts.push(f.group);
  if (f.backend !== null) parts.push("→", f.backend, f.reason, `${f.matched_blocks}/${f.total_blocks}`);
  if (typeof f.attempts === "number" && f.attempts > 1) parts.push(`(${f.attempts} attempts)`);
  if (f.error_code !== null) parts.push(f.error_code);
  if (typeof f.ttft_ms === "number") parts.push(`ttft ${Math.round(f.ttft_ms)} ms`);
  if (typeof f.duration_ms === "number") parts.push(`${Math.round(f.duration_ms)} ms`);
  if (typeof f.prompt_tokens === "number") parts.push(`${f.prompt_tokens}+${f.completion_tokens} tok (${f.cached_tokens} cached)`);
  if (typeof f.key_id === "string") parts.push(f.key_id === "master" ? "master" : `${f.key_id.slice(0, 8)}…`);
  return parts.join(" ");
}

function event(f: Fields): string {
  switch (f.event) {
    case "failover":
      return `failover ${f.group} ${f.backend} (${f.cause}) → attempt ${f.next_attempt}`;
    case "breaker":
      return `breaker ${f.group} ${f.backend} ${f.from} → ${f.to}`;
    case "registry": {
      const removed = Array.isArray(f.removed) && f.removed.length > 0 ? `; removed ${f.removed.join(", ")}` : "";
      const changed = Array.isArray(f.changed) && f.changed.length > 0 ? ` ${f.changed.join(", ")}` : "";
      return `registry rev ${f.rev} ${f.op}${changed}${removed}`;
    }
    default:
      return `${String(f.event)} ${JSON.stringify(f)}`;
  }
}

/** `/v1/chat/completions` → `chat`: the endpoint's first word. */
function endpoint(path: unknown): string {
  // vLLM's own paths (/rerank, /v2/rerank, /score) are named as /v1's are.
  return typeof path === "string" ? (path.replace(/^\/(v\d+\/)?/, "").split("/")[0] ?? path) : "?";
}

/** The line's time on the local clock, to the second. */
function clock(time: unknown): string {
  const d = new Date(typeof time === "string" ? time : Date.now());
  return Number.isNaN(d.getTime()) ? "--:--:--" : d.toTimeString().slice(0, 8);
}
