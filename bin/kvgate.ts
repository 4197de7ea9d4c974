#!/usr/bin/env node
// The kvgate CLI over the gateway's admin API (/admin/v1). `npx kvgate` runs it with the project's Node.
import { main } from "../cli/main.ts";

/**
 * A reader that stopped reading (`| head`, less quit early) closes the pipe: that is not the
 * command failing, so it ends quietly with 0, as `git log | head` does. Left unhandled, the write
 * error was Node's stack and exit 1.
 */
function onOutputError(e: NodeJS.ErrnoException): void {
  if (e.code !== "EPIPE") process.stderr.write(`kvgate: writing the output failed (${e.message})\n`);
  process.exit(e.code === "EPIPE" ? 0 : 1);
}

process.stdout.on("error", onOutputError);
process.exitCode = await main(process.argv.slice(2), process.env);
