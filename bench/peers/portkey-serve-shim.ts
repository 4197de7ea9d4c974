/**
 * Stands in for @hono/node-server inside Portkey's start-server.js (the only name it imports
 * is `serve`): the same serve, always bound to 127.0.0.1.
 */
import type { AddressInfo } from "node:net";

interface ServeOptions {
  port?: number;
  hostname?: string;
  [option: string]: unknown;
}
interface NodeServerAdapter {
  serve(options: ServeOptions, listener?: (info: AddressInfo) => void): unknown;
}

const real = new URL(import.meta.url).searchParams.get("real");
if (!real) throw new Error("portkey-serve-shim: loaded without the real @hono/node-server URL");
const adapter = (await import(real)) as NodeServerAdapter;

export function serve(options: ServeOptions, listener?: (info: AddressInfo) => void): unknown {
  return adapter.serve({ ...options, hostname: "127.0.0.1" }, listener);
}
