import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { adminClient } from "./admin-client.ts";
import { CliError } from "./cli-error.ts";
import type { Command, Flags, Io } from "./command-io.ts";
import { FLEET_COMMANDS, FLEET_USAGE } from "./commands.ts";
import { KEY_ARGUMENTS, KEY_COMMANDS, KEY_USAGE } from "./keys.ts";

const OPTIONS = {
  group: { type: "string" },
  id: { type: "string" },
  url: { type: "string" },
  model: { type: "string" },
  "max-in-flight": { type: "string" },
  weight: { type: "string" },
  "api-key-env": { type: "string" },
  file: { type: "string" },
  wait: { type: "boolean" },
  timeout: { type: "string" },
  json: { type: "boolean" },
  models: { type: "string" },
  rpm: { type: "string" },
  tpm: { type: "string" },
  "max-parallel": { type: "string" },
  "budget-tokens": { type: "string" },
  "budget-usd": { type: "string" },
  period: { type: "string" },
  origins: { type: "string" },
  expires: { type: "string" },
  name: { type: "string" },
  team: { type: "string" },
  user: { type: "string" },
  "no-usage": { type: "boolean" },
  key: { type: "string" },
  since: { type: "string" },
  until: { type: "string" },
  status: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

const COMMANDS: Record<string, Command> = { ...FLEET_COMMANDS, ...KEY_COMMANDS };
/** Positional arguments by command; a command not named takes none. */
const ARGUMENTS: Record<string, readonly string[]> = KEY_ARGUMENTS;

export const USAGE = `usage: npx kvgate <command> [flags] [--json]

${FLEET_USAGE}
${KEY_USAGE}

environment: KVGATE_URL (default http://127.0.0.1:8787), KVGATE_ADMIN_KEY (the gateway's admin key)
--json prints the admin API's answer as JSON.`;

const stdio: Io = {
  out: (text) => process.stdout.write(text + "\n"),
  note: (text) => process.stderr.write(text + "\n"),
  sleep: (ms) => sleep(ms),
};

/** The command a command line's first words name (the longest that matches), and the words after it as its arguments. */
function commandOf(positionals: readonly string[]): { command: Command; args: readonly string[] } {
  for (let words = Math.min(2, positionals.length); words >= 1; words--) {
    const name = positionals.slice(0, words).join(" ");
    const command = COMMANDS[name];
    if (!command) continue;
    const args = positionals.slice(words);
    const wanted = ARGUMENTS[name] ?? [];
    if (args.length !== wanted.length) {
      const said = wanted.length === 0 ? "takes no argument" : args.length < wanted.length ? `needs ${wanted.join(" ")}` : `takes ${wanted.join(" ")} only`;
      throw new CliError(`${name} ${said}${args.length > wanted.length ? `, not "${args.join(" ")}"` : ""}`, 2);
    }
    return { command, args };
  }
  throw new CliError(`unknown command "${positionals.join(" ")}"`, 2);
}

/** Runs one command line; the exit code: 0 done, 1 failed, 2 a wrong command line. */
export async function main(argv: readonly string[], env: NodeJS.ProcessEnv, io: Io = stdio): Promise<number> {
  try {
    let parsed;
    try {
      parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true });
    } catch (e) {
      throw new CliError((e as Error).message.split("\n")[0] ?? "", 2);
    }
    const { positionals, values } = parsed;
    if (values.help || positionals.length === 0) {
      io.out(USAGE);
      return values.help ? 0 : 2;
    }
    const { command, args } = commandOf(positionals);
    await command(adminClient(env), values as Flags, io, args);
    return 0;
  } catch (e) {
    if (!(e instanceof CliError)) {
      // What is left after the client's own checks is an answer it could not read: a server that is not a gateway.
      process.stderr.write(`kvgate: reading the answer failed (${String((e as Error).message ?? e).split("\n")[0]}): not what a kvgate gateway answers; is KVGATE_URL one?\n`);
      return 1;
    }
    // A wrong command line (a missing flag too) shows what a right one looks like.
    process.stderr.write(`kvgate: ${e.message}\n${e.exitCode === 2 ? USAGE + "\n" : ""}`);
    return e.exitCode;
  }
}
