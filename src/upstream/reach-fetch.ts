import type { UpstreamReach } from "../config/upstream-access.ts";

/** A deployment's reach that resolved: what every call to it is sent with, and through. */
export type Reachable = Extract<UpstreamReach, { ok: true }>;

/**
 * Every call to a deployment — a request, a realtime handshake, a health probe — goes the one way
 * its reach says: through its binding (a Workers VPC Service or Network, the only way to a private
 * address) when it has one, else the runtime's own fetch; with its bearer token and its extra
 * headers (a Cloudflare Access service token) beside the call's own. A call that went another way
 * would fail on a private or Access-protected server and be charged to the backend.
 *
 * `headers` is the call's own plain record, completed in place: the runtime copies a plain record
 * natively once, where a Headers object would be built in JavaScript first. The extra headers
 * cannot replace the call's own or the bearer: the config refuses such a header name.
 */
export function fetchDeployment(reach: Reachable, url: string, init: RequestInit & { headers: Record<string, string> }): Promise<Response> {
  if (reach.authorization !== null) init.headers.authorization = reach.authorization;
  if (reach.headers) Object.assign(init.headers, reach.headers);
  return reach.via ? reach.via.fetch(url, init) : fetch(url, init);
}
