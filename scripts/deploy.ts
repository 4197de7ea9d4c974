/**
 * `npm run deploy`: checks the production config you name, then deploys wrangler.toml's
 * [env.production] with that config as its KVGATE_CONFIG secret — uploaded with the code, so what
 * runs is what was checked. The dev config in wrangler.toml is never deployed.
 *   KVGATE_CONFIG_FILE=config.prod.json npm run deploy
 *   KVGATE_CONFIG='{…}' npm run deploy
 * Arguments after `--` go to `wrangler deploy` (`npm run deploy -- --dry-run --outdir dist`).
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { checkConfig, envNames, minified, namedConfig, okLine, problemLines, secretLines, UsageError } from "./config-check.ts";
import { productionProblems } from "./production-config.ts";

function fail(lines: string[]): never {
  for (const line of lines) console.error(line);
  process.exit(1);
}

let source;
try {
  source = namedConfig(undefined, process.env);
} catch (e) {
  if (!(e instanceof UsageError)) throw e;
  fail([`npm run deploy: ${e.message}`]);
}
if (!source) fail(["npm run deploy: name the production config: KVGATE_CONFIG_FILE=config.prod.json npm run deploy (or KVGATE_CONFIG='{…}')"]);
const checked = checkConfig(source);
if (!checked.ok) fail(problemLines(source.name, checked.problems));
const json = minified(source);
// wrangler's API takes seconds to load: only once the config itself is good.
const { unstable_readConfig } = await import("wrangler");
let production;
try {
  production = unstable_readConfig({ config: resolve(import.meta.dirname, "..", "wrangler.toml"), env: "production" }, { hideWarnings: true });
} catch (e) {
  fail(wranglerRefusal(e));
}
const bound = new Set([...production.vpc_services, ...production.vpc_networks, ...production.services].map((b) => b.binding));
const unfit = productionProblems(checked.config, json, bound);
if (unfit.length > 0) fail(problemLines(source.name, unfit));

console.log(okLine(checked));
const names = envNames(checked.config);
for (const line of secretLines(names, "secrets it reads (each once: npx wrangler secret put NAME --env production)")) console.log(line);
if (names.bindings.length > 0) console.log(`  bindings it fetches through (in wrangler.toml's [env.production]): ${names.bindings.join(", ")}`);
console.log("  wrangler may warn that [vars] KVGATE_CONFIG is missing from env.production: production takes it as a secret, on purpose.");

// A secrets file only this user can read, gone when wrangler is done with it.
const dir = await mkdtemp(join(tmpdir(), "kvgate-deploy-"));
const secretsFile = join(dir, "secrets.json");
await writeFile(secretsFile, JSON.stringify({ KVGATE_CONFIG: json }), { mode: 0o600 });
const wrangler = join(dirname(createRequire(import.meta.url).resolve("wrangler/package.json")), "bin", "wrangler.js");
// Without KVGATE_CONFIG: wrangler lets the environment override a secrets file, and only the checked config may go.
const { KVGATE_CONFIG: _config, KVGATE_CONFIG_FILE: _file, ...env } = process.env;
const child = spawn(process.execPath, [wrangler, "deploy", "--env", "production", "--secrets-file", secretsFile, ...process.argv.slice(2)], { stdio: "inherit", env });
// Ctrl-C reaches wrangler itself (one process group); this process outlives it, to remove the file.
process.on("SIGINT", () => undefined);
process.on("SIGTERM", () => child.kill("SIGTERM"));
const code = await new Promise<number>((resolve) => child.on("exit", (c, signal) => resolve(c ?? (signal ? 1 : 0))));
await rm(dir, { recursive: true, force: true });
process.exit(code);

/**
 * An edit of wrangler.toml wrangler refuses (a vpc_networks entry without its tunnel_id, a TOML
 * typo), as its message, not its stack; a TOML typo's line, which its ParseError keeps apart from
 * the message (`location`), goes first, as `file:line:`, with the line's text.
 */
function wranglerRefusal(e: unknown): string[] {
  const [first, ...rest] = String(e instanceof Error ? e.message : e).split("\n").filter((line) => line.trim() !== "");
  const at = parseLocation(e);
  return [`npm run deploy: wrangler.toml${at ? `:${at.line}` : ""}: ${first}`, ...(at?.text ? [`  ${at.text}`] : []), ...rest];
}

function parseLocation(e: unknown): { line: number; text: string | null } | null {
  const location = typeof e === "object" && e !== null && "location" in e ? e.location : null;
  if (typeof location !== "object" || location === null || !("line" in location) || typeof location.line !== "number") return null;
  const text = "lineText" in location && typeof location.lineText === "string" && location.lineText.trim() !== "" ? location.lineText : null;
  return { line: location.line, text };
}
