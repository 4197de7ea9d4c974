/**
 * Streamed chat completions at a fixed concurrency until stopped: load for a person (or a test) to
 * watch on the dashboard. Each request is one of a few conversations with a shared system prompt
 * and a question of its own, so prefix-aware routing has prefixes to find and to spread.
 */

export interface ChatLoadOptions {
  url: string;
  key: string;
  model: string;
  concurrency: number;
  maxTokens: number;
}

export interface ChatLoad {
  /** Stops sending; resolves once every stream in flight has ended, with how they ended. */
  stop(): Promise<{ ok: number; failed: number }>;
}

const SYSTEM_PROMPTS = [
  "You are a support agent for a bicycle shop. Answer briefly and name the part involved. ",
  "You translate English into French. Keep the tone and the punctuation of the original. ",
  "You review Python code. Point out the one change that matters most, then stop. ",
].map((p) => p.repeat(6));

export function startChatLoad(o: ChatLoadOptions): ChatLoad {
  let stopped = false;
  const counts = { ok: 0, failed: 0 };
  let n = 0;
  const one = async (): Promise<void> => {
    const i = n++;
    const res = await fetch(`${o.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${o.key}`, "content-type": "application/json" },
      body: JSON.stringify({
        model: o.model,
        stream: true,
        max_tokens: o.maxTokens,
        messages: [
          { role: "system", content: SYSTEM_PROMPTS[i % SYSTEM_PROMPTS.length] },
          { role: "user", content: `Question ${i}: what should I check first?` },
        ],
      }),
    });
    await res.arrayBuffer();
    counts[res.ok ? "ok" : "failed"]++;
  };
  const loop = async (): Promise<void> => {
    while (!stopped) await one().catch(() => counts.failed++);
  };
  const loops = Array.from({ length: o.concurrency }, loop);
  return {
    async stop() {
      stopped = true;
      await Promise.all(loops);
      return counts;
    },
  };
}
