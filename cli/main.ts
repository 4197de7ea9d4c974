import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { adminClient } from "./admin-client.ts";
import { CliError } from "./cli-error.ts";
import { COMMANDS, USAGE, type Flags, type Io } from "./commands.ts";

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
  help: { type: "boolean", short: "h" },
} as const;

const stdio: Io = {
  out: (text) => process.stdout.write(text + "\n"),
  note: (text) => process.stderr.write(text + "\n"),
  sleep: (ms) => sleep(ms),
};

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
    const name = positionals.join(" ");
    const command = COMMANDS[name];
    if (!command) throw new CliError(`unknown command "${name}"`, 2);
    await command(adminClient(env), values as Flags, io);
    return 0;
  } catch (e) {
    if (!(e instanceof CliError)) throw e;
    // A wrong command line (a missing flag too) shows what a right one looks like.
    process.stderr.write(`kvgate: ${e.message}\n${e.exitCode === 2 ? USAGE + "\n" : ""}`);
    return e.exitCode;
  }
}
