import http from "node:http";

/**
 * A chat-completions upstream that holds every request until the test lets it go: a test decides
 * when each answer comes, so what a client does while requests are open is seen without timing.
 * Each answer is a short vLLM-style stream with usage.
 */
export interface HeldUpstream {
  url: string;
  /** Requests received, oldest first: the first user message's content of each. */
  readonly received: readonly string[];
  /** Requests received and not yet answered. */
  readonly open: number;
  /** Answers the oldest `count` open requests (all of them by default). */
  release(count?: number): void;
  /** Resolves once `count` requests have been received in all. */
  receivedAtLeast(count: number): Promise<void>;
  close(): Promise<void>;
}

function answer(res: http.ServerResponse): void {
  res.writeHead(200, { "content-type": "text/event-stream" });
  const chunk = (body: object): string => `data: ${JSON.stringify({ id: "chatcmpl-held", object: "chat.completion.chunk", created: 1, model: "held", ...body })}\n\n`;
  res.end(
    chunk({ choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] }) +
      chunk({ choices: [{ index: 0, delta: { content: "ok" }, finish_reason: "stop" }] }) +
      chunk({ choices: [], usage: { prompt_tokens: 10, completion_tokens: 1, total_tokens: 11, prompt_tokens_details: { cached_tokens: 0 } } }) +
      "data: [DONE]\n\n",
  );
}

export async function startHeldUpstream(): Promise<HeldUpstream> {
  const received: string[] = [];
  const waiting: http.ServerResponse[] = [];
  const watchers: { count: number; resolve: () => void }[] = [];
  const server = http.createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on("data", (part: Buffer) => parts.push(part));
    req.on("end", () => {
      const body = JSON.parse(Buffer.concat(parts).toString("utf8")) as { messages?: { content?: string }[] };
      received.push(body.messages?.[0]?.content ?? "");
      waiting.push(res);
      for (const w of watchers.filter((w) => received.length >= w.count)) {
        watchers.splice(watchers.indexOf(w), 1);
        w.resolve();
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address === "string") throw new Error("no address");
  return {
    url: `http://127.0.0.1:${address.port}`,
    received,
    get open() {
      return waiting.length;
    },
    release(count = waiting.length) {
      for (const res of waiting.splice(0, count)) answer(res);
    },
    receivedAtLeast(count) {
      if (received.length >= count) return Promise.resolve();
      return new Promise((resolve) => watchers.push({ count, resolve }));
    },
    close: () =>
      new Promise<void>((resolve) => {
        for (const res of waiting.splice(0)) res.destroy();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
