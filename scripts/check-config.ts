/**
 * Validates a gateway config before a deploy, with the same parser the Worker uses, and reports
 * every field's problems at once (the checks across fields follow once the fields pass). JSON, or JSON with comments and trailing commas.
 *   npm run check-config -- config.prod.json          a file
 *   KVGATE_CONFIG_FILE=config.prod.json npm run check-config
 *   KVGATE_CONFIG='{…}' npm run check-config            the environment
 *   npm run check-config                                the dev config in wrangler.toml
 * Exits 1 when the config has a problem or cannot be read.
 */
import { checkConfig, envNames, namedConfig, okLine, pastedValueLines, problemLines, secretLines, unpricedLine, UsageError, type ConfigSource } from "./config-check.ts";

/** The dev config as `npm start` reads it (wrangler's parser takes a second to load: only when asked). */
async function devConfig(): Promise<ConfigSource> {
  const { wranglerDevConfigText } = await import("../bench/harness/dev-config.ts");
  try {
    return { name: "wrangler.toml [vars] KVGATE_CONFIG", raw: wranglerDevConfigText(process.cwd()) };
  } catch (e) {
    throw new UsageError(`${(e as Error).message}; or name a config file`);
  }
}

const USAGE = "usage: npm run check-config -- [config.json]   (or KVGATE_CONFIG_FILE=… / KVGATE_CONFIG='{…}'; none: wrangler.toml's)";

try {
  const arg = process.argv[2];
  if (arg === "--help" || arg === "-h") {
    console.log(USAGE);
    process.exit(0);
  }
  if (arg?.startsWith("-")) throw new UsageError(`unknown flag ${arg} (npm run check-config -- --help)`);
  const checked = checkConfig(namedConfig(arg, process.env) ?? (await devConfig()));
  if (!checked.ok) {
    for (const line of problemLines(checked.source.name, checked.problems)) console.error(line);
    process.exit(1);
  }
  console.log(okLine(checked));
  const names = envNames(checked.config);
  for (const line of secretLines(names, "secrets it reads")) console.log(line);
  if (names.bindings.length > 0) console.log(`  bindings it fetches through: ${names.bindings.join(", ")}`);
  for (const line of pastedValueLines(names)) console.error(line);
  const unpriced = unpricedLine(checked.config);
  if (unpriced) console.log(unpriced);
} catch (e) {
  if (!(e instanceof UsageError)) throw e;
  console.error(`check-config: ${e.message}`);
  process.exit(1);
}
