/**
 * A local HTTP fan-out that stands in for the edge in front of N instances of a router: each
 * request lands on one instance, picked per request, not per session — as a client's requests
 * reach whichever edge location and isolate is nearest at the time. Stickiness per session would
 * hide the very thing measured: whether an instance knows what another one routed.
 *
 * The pick is a seeded hash of the request's body: as spread as a random draw, yet the same
 * request of the same trace lands on the same instance on every run of a seed, whatever order
 * the concurrent requests arrive in. Answers are relayed chunk by chunk as they arrive.
 */
import { createHash } from "node:crypto";
import http, { type IncomingHttpHeaders } from "node:http";

export interface FanOut {
  url: string;
  /** Requests sent to each instance so far, in the order of the origins given. */
  counts(): number[];
  close(): Promise<void>;
}

/** Which of `instances` a request with this body goes to, for `seed`. */
export function instanceFor(body: Uint8Array, seed: number, instances: number): number {
  const digest = createHash("sha256").update(`${seed}:`).update(body).digest();
  return digest.readUInt32BE(0) % instances;
}

// Connection-level headers belong to one hop; node:http sets its own on each side.
const HOP_BY_HOP = new Set(["connection", "keep-alive", "transfer-encoding", "upgrade", "proxy-connection", "te", "trailer"]);

function endToEnd(headers: IncomingHttpHeaders): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) if (!HOP_BY_HOP.has(name)) out[name] = value;
  return out;
}

function fanOutError(res: http.ServerResponse, instance: number, message: string): void {
  const body = JSON.stringify({ error: { message: `fan-out: instance ${instance} failed: ${message}`, type: "fan_out_error", param: null, code: null } });
  res.writeHead(502, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

/** Listens on 127.0.0.1 (a free port) in front of `origins` (http://host:port, no path). */
export async function startFanOut(origins: readonly string[], seed: number): Promise<FanOut> {
  if (origins.length === 0) throw new Error("a fan-out needs at least one origin");
  const targets = origins.map((o) => new URL(o));
  // Many streams at once to each instance, idle sockets kept for the next turn (as the replay client does).
  const agents = targets.map(() => new http.Agent({ keepAlive: true, maxSockets: Infinity, maxFreeSockets: 65_536, scheduling: "lifo" }));
  const counts = targets.map(() => 0);

  const server = http.createServer({ noDelay: true }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const i = instanceFor(body, seed, targets.length);
      counts[i] = (counts[i] ?? 0) + 1;
      const target = targets[i] as URL;
      const headers = { ...endToEnd(req.headers), host: target.host, "content-length": String(body.length) };
      const upstream = http.request(new URL(req.url ?? "/", target), { method: req.method, agent: agents[i], headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, endToEnd(answer.headers));
        answer.pipe(res);
        answer.on("error", () => res.destroy());
      });
      upstream.on("error", (error) => {
        if (res.headersSent) res.destroy(error);
        else fanOutError(res, i, error.message);
      });
      // A client that leaves takes its request to the instance with it: nothing stays in flight.
      res.on("close", () => {
        if (!res.writableFinished) upstream.destroy();
      });
      upstream.end(body);
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", resolve);
  });
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    counts: () => [...counts],
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      for (const a of agents) a.destroy();
    },
  };
}
