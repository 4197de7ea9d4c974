/**
 * A stand-in for a Workers VPC binding, bound to the gateway in the Workers-runtime tests as
 * `GPU_VPC` (a service binding to this second Worker). Workers VPC itself needs a Cloudflare
 * account and a Cloudflare Tunnel; what the gateway sees of one is the same: an object with
 * `fetch(url, init)`. This Worker plays a GPU server at a private address behind Cloudflare
 * Access: it answers only for that address, only with the Access service token, and says in its
 * answer where it was reached. Its model "always-fails" answers every chat with a 500 (its
 * /health stays good), for breaker probes. Its /v1/realtime accepts a WebSocket that says first
 * where it was reached and for which model, then echoes what it is sent.
 */
export const VPC_HOST = "gpu.vpc.internal:8000";
/**
 * A server at another private address started with an API key (vLLM's --api-key): every /v1
 * route, its models list too, wants the key as a bearer token, and it wants no Access token.
 */
export const KEYED_HOST = "gpu-keyed.vpc.internal:8000";
/**
 * A server at a third private address behind a web application firewall (Cloudflare's WAF,
 * ModSecurity): a request whose body holds `DROP TABLE` is refused with the firewall's 403 page,
 * whatever backend it was meant for; any other is served. It wants no token.
 */
export const WAF_HOST = "gpu-waf.vpc.internal:8000";

export const VPC_STAND_IN_SCRIPT = `
export default {
  async fetch(req, env) {
    const url = new URL(req.url);
    if (url.host === ${JSON.stringify(KEYED_HOST)}) {
      if (url.pathname.startsWith("/v1/") && req.headers.get("authorization") !== "Bearer " + env.GPU_API_KEY) {
        return Response.json({ error: "Unauthorized" }, { status: 401 });
      }
      if (req.method === "GET" && url.pathname === "/v1/models") return Response.json({ object: "list", data: [] });
    } else if (url.host === ${JSON.stringify(WAF_HOST)}) {
      if (req.method === "POST" && (await req.clone().text()).includes("DROP TABLE")) {
        return new Response("<!DOCTYPE html><html><head><title>Attention Required! | Cloudflare</title></head><body>Sorry, you have been blocked</body></html>", { status: 403, headers: { "content-type": "text/html; charset=UTF-8" } });
      }
    } else if (url.host !== ${JSON.stringify(VPC_HOST)}) {
      return new Response("no route to " + url.host, { status: 502 });
    } else {
      const id = req.headers.get("cf-access-client-id");
      const secret = req.headers.get("cf-access-client-secret");
      if (id !== env.ACCESS_CLIENT_ID || secret !== env.ACCESS_CLIENT_SECRET) {
        return new Response("Forbidden", { status: 403, headers: { "content-type": "text/html" } });
      }
    }
    if (req.method === "GET" && url.pathname === "/health") return new Response("ok");
    if (url.pathname === "/v1/realtime" && req.headers.get("upgrade") === "websocket") {
      const [client, server] = Object.values(new WebSocketPair());
      server.accept();
      server.addEventListener("message", (e) => server.send(e.data));
      server.send("reached " + url.host + " through the binding for " + url.searchParams.get("model"));
      return new Response(null, { status: 101, webSocket: client });
    }
    if (req.method !== "POST" || url.pathname !== "/v1/chat/completions") return new Response("not found", { status: 404 });
    const body = await req.json();
    if (body.model === "always-fails") return Response.json({ error: { message: "engine died", type: "server_error" } }, { status: 500 });
    const content = "reached " + url.host + " through the binding";
    if (body.stream) {
      const chunk = { id: "chatcmpl-vpc", object: "chat.completion.chunk", created: 0, model: body.model, choices: [{ index: 0, delta: { role: "assistant", content }, finish_reason: "stop" }] };
      return new Response("data: " + JSON.stringify(chunk) + "\\n\\ndata: [DONE]\\n\\n", { headers: { "content-type": "text/event-stream" } });
    }
    return Response.json({
      id: "chatcmpl-vpc", object: "chat.completion", created: 0, model: body.model,
      choices: [{ index: 0, message: { role: "assistant", content }, finish_reason: "stop" }],
      usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
    });
  },
};
`;
