import http from "node:http";

/**
 * An OpenAI-compatible upstream whose health a test switches over HTTP, to drive failover and
 * circuit breakers: `POST /__mode` with `{"mode":"ok"}`, `{"mode":"fail"}` (every request a 500,
 * /health a 503) or `{"mode":"429","retryAfter":"0.05"}`. `GET /__count` says how many inference
 * requests and health probes it received, so a test can tell that an open circuit sent none.
 */
export interface SwitchableUpstream {
  url: string;
  close(): Promise<void>;
}

type Mode = { mode: "ok" } | { mode: "fail" } | { mode: "429"; retryAfter: string };

export async function startSwitchableUpstream(model: string): Promise<SwitchableUpstream> {
  let mode: Mode = { mode: "ok" };
  const count = { inference: 0, health: 0 };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const path = req.url ?? "/";
      if (req.method === "POST" && path === "/__mode") {
        mode = JSON.parse(Buffer.concat(chunks).toString("utf8")) as Mode;
        count.inference = 0;
        count.health = 0;
        return void res.writeHead(204).end();
      }
      if (path === "/__count") return void res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(count));
      if (path === "/health") {
        count.health++;
        return void res.writeHead(mode.mode === "ok" ? 200 : 503).end();
      }
      count.inference++;
      if (mode.mode === "fail") {
        return void res.writeHead(500, { "content-type": "application/json" }).end('{"error":{"message":"engine crashed"}}');
      }
      if (mode.mode === "429") {
        return void res.writeHead(429, { "content-type": "application/json", "retry-after": mode.retryAfter }).end('{"error":{"message":"too many requests"}}');
      }
      const body = JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}") as { stream?: boolean };
      const message = { id: "chatcmpl-s", object: "chat.completion", created: 1, model, choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }] };
      if (!body.stream) return void res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(message));
      res.writeHead(200, { "content-type": "text/event-stream" });
      const chunk = { id: "chatcmpl-s", object: "chat.completion.chunk", created: 1, model, choices: [{ index: 0, delta: { content: "ok" }, finish_reason: "stop" }] };
      res.end(`data: ${JSON.stringify(chunk)}\n\ndata: [DONE]\n\n`);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (!address || typeof address === "string") throw new Error("no address");
  return {
    url: `http://127.0.0.1:${address.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
