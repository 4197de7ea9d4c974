import http from "node:http";

/**
 * An upstream that answers every request with the same bytes, written in the chunks given and
 * flushed one by one — so tests can compare what a client receives with exactly what the
 * upstream sent, and place chunk boundaries where they hurt (inside a UTF-8 character, inside
 * the `"model":"…"` field).
 */
export interface ScriptedUpstream {
  url: string;
  close(): Promise<void>;
}

export async function startScriptedUpstream(chunks: readonly Uint8Array[], gapMs = 5): Promise<ScriptedUpstream> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on("end", () => {
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      let i = 0;
      const next = () => {
        const chunk = chunks[i++];
        if (!chunk) return void res.end();
        res.write(chunk);
        setTimeout(next, gapMs);
      };
      next();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address === "string") throw new Error("no address");
  return {
    url: `http://127.0.0.1:${address.port}`,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const enc = new TextEncoder();

/** A vLLM-style stream with multi-byte characters, cut into awkward chunks. */
export function scriptedStream(model: string): { bytes: Uint8Array; chunks: Uint8Array[] } {
  const events = ["Grüße ", "from ", "the ", "édge — ", "✓"].map(
    (content, i) => `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":${JSON.stringify(model)},"choices":[{"index":0,"delta":{"content":${JSON.stringify(content)}},"finish_reason":${i === 4 ? '"stop"' : "null"}}]}\n\n`,
  );
  const bytes = enc.encode(events.join("") + "data: [DONE]\n\n");
  // Cut every 37 bytes: boundaries fall inside JSON keys, the model field and UTF-8 sequences.
  const chunks: Uint8Array[] = [];
  for (let o = 0; o < bytes.length; o += 37) chunks.push(bytes.slice(o, o + 37));
  return { bytes, chunks };
}
