import { fleetHelp, parseFleetArgs, type ParsedArgs } from "./cli-args.ts";
import { startFleet } from "./index.ts";

/** `npm run fleet -- [flags]`: starts the fleet, prints its URLs, stops on SIGINT/SIGTERM. */

function fail(error: unknown, code: number): never {
  console.error(`fleet: ${error instanceof Error ? error.message : String(error)}`);
  process.exit(code);
}

function parseArgs(): ParsedArgs {
  try {
    return parseFleetArgs(process.argv.slice(2));
  } catch (error) {
    return fail(error, 2);
  }
}

async function main(): Promise<void> {
  const parsed = parseArgs();
  if (parsed.help) {
    console.log(fleetHelp());
    return;
  }
  const fleet = await startFleet(parsed.options);
  for (const url of fleet.urls) console.log(url);
  let stopping = false;
  const stop = (signal: NodeJS.Signals): void => {
    if (stopping) return;
    stopping = true;
    console.error(`fleet: ${signal}, stopping`);
    fleet.close().then(
      () => process.exit(0),
      (error: unknown) => fail(error, 1),
    );
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
}

main().catch((error: unknown) => fail(error, 1));
