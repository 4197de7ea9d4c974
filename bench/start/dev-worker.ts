/**
 * `npm start`'s gateway: wrangler.toml's Worker on wrangler's local dev server, as `wrangler dev`
 * serves it, but with no debugger. wrangler dev always opens one, with no authentication, to every
 * local user: its proxy's on 127.0.0.1:9229 and workerd's own on a free port, through which anyone
 * could evaluate env.KVGATE_ADMIN_KEY or read every request's Authorization header. Its command
 * line cannot close them; wrangler's API, unstable_startWorker, can (`dev.inspector: false`). It
 * also keeps the Worker out of wrangler's dev registry, which would open workerd's debug port,
 * handing any local process the Worker's Durable Objects.
 * bench/start.ts runs it with the command line wranglerDevArgs makes; its stdout carries the
 * Worker's log lines. Miniflare's own exit hook stops workerd on SIGINT, SIGTERM or SIGHUP, as
 * under wrangler dev.
 */
import { join } from "node:path";
import { unstable_startWorker } from "wrangler";
import { readWranglerDevArgs } from "./wrangler-dev.ts";

const o = readWranglerDevArgs(process.argv.slice(2));
try {
  const worker = await unstable_startWorker({
    config: join(import.meta.dirname, "..", "..", "wrangler.toml"),
    // The keys come from this file only, as `wrangler dev --env-file` reads it (keys-file.ts).
    envFiles: [o.envFile],
    // As `wrangler dev --var` gives it: its value left out of the bindings' table.
    bindings: o.config ? { KVGATE_CONFIG: { type: "plain_text", value: JSON.stringify(o.config), hidden: true } } : undefined,
    dev: {
      server: { hostname: o.host, port: o.port },
      inspector: false,
      persist: o.persistTo,
      // Rebuilt on a change to the sources, as wrangler dev does.
      watch: true,
    },
  });
  await worker.ready;
} catch (e) {
  console.error(`kvgate: the gateway could not start: ${(e as Error).message}`);
  process.exit(1);
}
