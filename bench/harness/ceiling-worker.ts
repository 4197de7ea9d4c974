/**
 * The ceiling any routing gateway on this runtime has, as a Worker script: the floor plus one
 * Durable Object RPC to a toy router (floorRoute), plus reading the JSON body and sending it on
 * re-serialised (ceilingScript). bench:ceiling, bench:overhead and bench:profile serve it.
 */

/** A router that answers every ask with the same pick: the RPC's cost, none of the routing. */
const TOY_ROUTER = `import { DurableObject } from "cloudflare:workers";
export class ToyRouter extends DurableObject {
  seq = 0;
  route(group, chain, released, exclude) {
    return { backend: 0, backendId: "sim-0", lease: "l" + ++this.seq, reason: "prefix-hit", matched: chain.length - 1, total: chain.length, routedAt: Date.now() };
  }
}`;
const CHAIN = "[1, 2, 3, 4, 5, 6, 7, 8]";
/** The toy router's binding, for startScriptWorker. */
export const TOY_ROUTER_BINDING = { ROUTER: "ToyRouter" };

export function floorRoute(upstream: string): string {
  return `${TOY_ROUTER}
export default {
  async fetch(req, env) {
    const u = new URL(req.url);
    await env.ROUTER.getByName("g").route("g", ${CHAIN}, [], []);
    const up = await fetch(${JSON.stringify(upstream)} + u.pathname, { method: req.method, headers: req.headers, body: req.body });
    return new Response(up.body, up);
  },
};`;
}

/** The ceiling (floor+body+route): the least any prefix-routing gateway does. bench:ceiling's floor+body+route and bench:overhead's `ceiling`. */
export function ceilingScript(upstream: string): string {
  return `${TOY_ROUTER}
const utf8 = new TextDecoder("utf-8", { fatal: true });
export default {
  async fetch(req, env) {
    const u = new URL(req.url);
    const body = JSON.parse(utf8.decode(await req.arrayBuffer()));
    await env.ROUTER.getByName("g").route("g", ${CHAIN}, [], []);
    const up = await fetch(${JSON.stringify(upstream)} + u.pathname, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return new Response(up.body, { status: up.status, headers: { "content-type": up.headers.get("content-type") ?? "application/json" } });
  },
};`;
}
