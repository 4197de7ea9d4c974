import http from "node:http";

/**
 * A chat completions server that answers as vLLM does for the request's features: `n` choices
 * (interleaved in a stream, each opening with its role), parallel tool calls whose arguments come
 * split over several events, `logprobs`/`top_logprobs`, `stream_options.include_usage` and
 * `continuous_usage_stats`. Every answer says "hi there" (2 tokens) per choice, or calls the
 * request's tools; its prompt counts 11 tokens. Under `/strict/` it refuses OpenAI-only fields a
 * vLLM server may not take (`metadata`, `store`) with vLLM's 400; under `/cut:<bytes>/` a stream
 * comes in pieces of that many bytes.
 */
export interface FeaturesUpstream {
  url: string;
  /** The request bodies received, oldest first. */
  bodies: Record<string, unknown>[];
  close(): Promise<void>;
}

const PROMPT_TOKENS = 11;

interface Choice {
  index: number;
  /** The deltas this choice sends after its role, each one event. */
  deltas: Record<string, unknown>[];
  finish: string;
  completionTokens: number;
}

function choicesFor(body: Record<string, unknown>): Choice[] {
  const n = typeof body.n === "number" ? body.n : 1;
  const tools = Array.isArray(body.tools) ? (body.tools as { function?: { name?: string } }[]) : [];
  const out: Choice[] = [];
  for (let index = 0; index < n; index++) {
    if (tools.length > 0) {
      const deltas: Record<string, unknown>[] = [];
      // Each tool called once, in parallel: its id and name first, then its arguments in three pieces.
      tools.forEach((t, k) => {
        const name = t.function?.name ?? "f";
        deltas.push({ tool_calls: [{ index: k, id: `call_${index}_${k}`, type: "function", function: { name, arguments: "" } }] });
        for (const piece of ['{"city": ', `"Paris ${index}-${k}", `, '"model": "upstream-7b"}']) deltas.push({ tool_calls: [{ index: k, function: { arguments: piece } }] });
      });
      out.push({ index, deltas, finish: "tool_calls", completionTokens: deltas.length });
    } else {
      out.push({ index, deltas: [{ content: "hi" }, { content: " there" }], finish: "stop", completionTokens: 2 });
    }
  }
  return out;
}

function logprobsFor(body: Record<string, unknown>, token: string): unknown {
  if (body.logprobs !== true) return null;
  const top = typeof body.top_logprobs === "number" ? body.top_logprobs : 0;
  const entry = (t: string) => ({ token: t, logprob: -0.5, bytes: [...Buffer.from(t)] });
  return { content: [{ ...entry(token), top_logprobs: Array.from({ length: top }, (_, i) => entry(`${token}${i}`)) }] };
}

function usage(completion: number): Record<string, unknown> {
  return { prompt_tokens: PROMPT_TOKENS, total_tokens: PROMPT_TOKENS + completion, completion_tokens: completion, prompt_tokens_details: null };
}

export async function startFeaturesUpstream(): Promise<FeaturesUpstream> {
  const bodies: Record<string, unknown>[] = [];
  const server = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (c: Buffer) => parts.push(c));
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(parts).toString("utf8")) as Record<string, unknown>;
      bodies.push(body);
      const model = String(body.model);
      if (req.url?.startsWith("/strict/") && (body.metadata !== undefined || body.store !== undefined)) {
        const field = body.metadata !== undefined ? "metadata" : "store";
        res.writeHead(400, { "content-type": "application/json" });
        return void res.end(JSON.stringify({ object: "error", message: `1 validation error: ${field} Extra inputs are not permitted`, type: "BadRequestError", param: null, code: 400 }));
      }
      const choices = choicesFor(body);
      const head = { id: "chatcmpl-f", object: "chat.completion.chunk", created: 1, model };
      const total = choices.reduce((s, c) => s + c.completionTokens, 0);
      if (body.stream !== true) {
        const message = (c: Choice) => {
          const calls = new Map<number, { id: string; type: string; function: { name: string; arguments: string } }>();
          let content = "";
          for (const d of c.deltas) {
            if (typeof d.content === "string") content += d.content;
            for (const t of (d.tool_calls as { index: number; id?: string; function: { name?: string; arguments: string } }[] | undefined) ?? []) {
              const call = calls.get(t.index) ?? { id: t.id ?? "", type: "function", function: { name: t.function.name ?? "", arguments: "" } };
              call.function.arguments += t.function.arguments;
              calls.set(t.index, call);
            }
          }
          return calls.size > 0 ? { role: "assistant", content: null, tool_calls: [...calls.values()] } : { role: "assistant", content };
        };
        res.writeHead(200, { "content-type": "application/json" });
        return void res.end(JSON.stringify({ ...head, object: "chat.completion", choices: choices.map((c) => ({ index: c.index, message: message(c), logprobs: logprobsFor(body, "hi"), finish_reason: c.finish })), usage: usage(total) }));
      }
      const options = (body.stream_options ?? {}) as { include_usage?: boolean; continuous_usage_stats?: boolean };
      const include = options.include_usage === true;
      const continuous = include && options.continuous_usage_stats === true;
      let done = 0;
      const event = (choice: Record<string, unknown>) => `data: ${JSON.stringify({ ...head, choices: [choice], ...(continuous ? { usage: usage(done) } : {}) })}\n\n`;
      const events: string[] = [];
      for (const c of choices) events.push(event({ index: c.index, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }));
      const steps = Math.max(...choices.map((c) => c.deltas.length));
      for (let s = 0; s < steps; s++) {
        for (const c of choices) {
          const d = c.deltas[s];
          if (!d) continue;
          done++;
          const last = s === c.deltas.length - 1;
          events.push(event({ index: c.index, delta: d, logprobs: logprobsFor(body, typeof d.content === "string" ? d.content : "x"), finish_reason: last ? c.finish : null, ...(last ? { stop_reason: null } : {}) }));
        }
      }
      if (include) events.push(`data: ${JSON.stringify({ ...head, choices: [], usage: usage(total) })}\n\n`);
      events.push("data: [DONE]\n\n");
      res.writeHead(200, { "content-type": "text/event-stream" });
      // Under /cut:<bytes>/, the stream is written in pieces of that many bytes; else an event a write.
      const cut = /\/cut:(\d+)\//.exec(req.url ?? "");
      const size = cut ? Number(cut[1]) : 0;
      const all = Buffer.from(events.join(""));
      const writes: Buffer[] = [];
      if (size > 0) for (let o = 0; o < all.length; o += size) writes.push(all.subarray(o, o + size));
      else for (const e of events) writes.push(Buffer.from(e));
      let i = 0;
      const next = (): void => {
        const w = writes[i++];
        if (w === undefined) return void res.end();
        res.write(w);
        setTimeout(next, size > 0 ? 0 : 2);
      };
      next();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address === "string") throw new Error("no address");
  return { url: `http://127.0.0.1:${address.port}`, bodies, close: () => new Promise<void>((resolve) => server.close(() => resolve())) };
}
