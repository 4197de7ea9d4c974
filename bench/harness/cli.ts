import { HelpRequested, UsageError } from "./argv.ts";

/**
 * Every bench command's entry (and the tools run with `node`, named as they are invoked): runs `main` (the command's reading of its command line, or the
 * whole command) so that a command line it cannot run is one line on stderr, `name: message`, and
 * exit status 2, and --help prints the usage to stdout and exits 0, both before anything has
 * started. Any other error is thrown on untouched: a real failure keeps its stack (and Node's exit 1).
 */
export async function runCli<T>(name: string, main: () => T | Promise<T>, invokedAs = `npm run ${name} --`): Promise<T> {
  try {
    return await main();
  } catch (error) {
    if (error instanceof HelpRequested) {
      console.log(`usage: ${invokedAs} ${error.usage}`);
      process.exit(0);
    }
    if (error instanceof UsageError) {
      console.error(`${name}: ${error.message}`);
      process.exit(2);
    }
    throw error;
  }
}
