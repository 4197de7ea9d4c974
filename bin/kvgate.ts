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
// A failure's one line has nowhere left to go once stderr's reader is gone (`2>&1 | head`): the
// command's own exit code still says how it ended, where the unhandled error made every exit 1.
process.stderr.on("error", () => {});
process.exitCode = await main(process.argv.slice(2), process.env);
