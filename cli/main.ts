import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { adminClient } from "./admin-client.ts";
import { CliError } from "./cli-error.ts";
import { EVERY_COMMAND_FLAGS, type Command, type Flag, type Flags, type Io } from "./command-io.ts";
import { FLEET_COMMANDS, FLEET_FLAGS, FLEET_USAGE } from "./commands.ts";
import { KEY_ARGUMENTS, KEY_COMMANDS, KEY_FLAGS, KEY_USAGE } from "./keys.ts";

/** Every flag any command takes, for parseArgs; which command takes which is FLAGS'. */
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
  usage: { type: "boolean" },
  key: { type: "string" },
  since: { type: "string" },
  until: { type: "string" },
  status: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const;

const COMMANDS: Record<string, Command> = { ...FLEET_COMMANDS, ...KEY_COMMANDS };
/** The flags each command takes, besides EVERY_COMMAND_FLAGS. */
const FLAGS: Record<string, readonly Flag[]> = { ...FLEET_FLAGS, ...KEY_FLAGS };
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

/** The command a command line's first words name (the longest that matches), its name, and the words after it as its arguments. */
function commandOf(positionals: readonly string[]): { name: string; command: Command; args: readonly string[] } {
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
    return { name, command, args };
  }
  throw new CliError(`unknown command "${positionals.join(" ")}"`, 2);
}

/**
 * Refuses a flag the command does not take: left unread, `keys create --model M` (a flag of
 * `usage`) made a key for every model. A flag of its own the given one is a prefix of, or that is
 * a prefix of it, is offered (--model for --models).
 */
function refuseOtherFlags(name: string, given: readonly string[]): void {
  const takes = [...(FLAGS[name] ?? []), ...EVERY_COMMAND_FLAGS] as readonly string[];
  const other = given.find((flag) => !takes.includes(flag));
  if (other === undefined) return;
  const near = takes.find((flag) => flag.startsWith(other) || other.startsWith(flag));
  throw new CliError(`${name} does not take --${other}${near === undefined ? "" : ` (did you mean --${near}?)`}`, 2);
}

/**
 * What a command line asks for: the command it names with its arguments and flags, the usage
 * (--help), or nothing (no command); a CliError (exit 2) for a wrong one.
 */
export function commandLine(argv: readonly string[]): { name: string; command: Command; args: readonly string[]; values: Flags } | "help" | "none" {
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options: OPTIONS, allowPositionals: true, strict: true });
  } catch (e) {
    throw new CliError((e as Error).message.split("\n")[0] ?? "", 2);
  }
  const { positionals, values } = parsed;
  if (values.help) return "help";
  if (positionals.length === 0) return "none";
  const { name, command, args } = commandOf(positionals);
  refuseOtherFlags(name, Object.keys(values));
  return { name, command, args, values: values as Flags };
}

/** Runs one command line; the exit code: 0 done, 1 failed, 2 a wrong command line. */
export async function main(argv: readonly string[], env: NodeJS.ProcessEnv, io: Io = stdio): Promise<number> {
  try {
    const line = commandLine(argv);
    if (line === "help" || line === "none") {
      io.out(USAGE);
      return line === "help" ? 0 : 2;
    }
    const { command, args, values } = line;
    await command(adminClient(env), values, io, args);
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
