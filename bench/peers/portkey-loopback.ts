/**
 * Preloaded into the Portkey process (`node --import`): Portkey's start-server.js calls
 * @hono/node-server's serve({ fetch, port }) with no host, so it would listen on every
 * interface. This routes that one import to a shim that adds hostname 127.0.0.1.
 */
import { register } from "node:module";

register("./portkey-resolve-hook.ts", import.meta.url);
