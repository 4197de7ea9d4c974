import { parseArgs, type ParseArgsOptionsConfig } from "node:util";

/**
 * The benchmarks' command lines, on node:util parseArgs. parseFlags takes `--flag value` and
 * `--flag=value`; an argument it does not know (a flag, a stray word, a value without its flag) is
 * `unknown argument X (usage)`, a flag without its value is `--flag needs a value`, and a switch
 * given a value is `--flag takes no value`: one line each, never silently ignored. The value
 * readers below refuse a bad value naming its flag, in one wording for every benchmark. Each refusal
 * is a UsageError, and `--help`/`-h` (on a command without a help flag of its own) is a
 * HelpRequested carrying the usage: runCli (cli.ts) tells both from a real failure.
 */

/** A command line the command cannot run: said in one line, without a stack (the stack is ours, not the user's). */
export class UsageError extends Error {
  override name = "UsageError";
}

/**
 * `--help` or `-h`: not a failure, a request for the usage, which the command prints before running
 * anything. Its message is the usage too, for a command not (yet) run through runCli.
 */
export class HelpRequested extends Error {
  override name = "HelpRequested";
  readonly usage: string;
  constructor(usage: string) {
    super(usage);
    this.usage = usage;
  }
}

type Values<O extends ParseArgsOptionsConfig> = ReturnType<typeof parseArgs<{ args: string[]; options: O; strict: true; allowPositionals: false }>>["values"];

export function parseFlags<const O extends ParseArgsOptionsConfig>(argv: readonly string[], options: O, usage: string): Values<O> {
  const unknown = (arg: string): UsageError => new UsageError(`unknown argument ${arg}${usage ? ` (${usage})` : ""}`);
  // Walked loosely first, to say what is wrong in our words; node's strict mode would also refuse
  // a value that starts with a dash (`--port -1`), which a value check reads better.
  const { tokens } = parseArgs({ args: [...argv], options, strict: false, allowPositionals: true, tokens: true });
  // Help wins over any other complaint, as it does for most commands; one that takes --help itself
  // (npm run fleet, npm start) gets it as a flag.
  const help = (t: (typeof tokens)[number]): boolean => t.kind === "option" && (t.rawName === "--help" || t.rawName === "-h");
  if (!Object.hasOwn(options, "help") && tokens.some(help)) throw new HelpRequested(usage);
  const canonical: string[] = [];
  for (const token of tokens) {
    if (token.kind === "positional") throw unknown(token.value);
    if (token.kind === "option-terminator") throw unknown("--");
    const spec = Object.hasOwn(options, token.name) ? options[token.name] : undefined;
    if (spec === undefined) throw unknown(token.rawName);
    if (spec.type === "string") {
      if (token.value === undefined) throw new UsageError(`${token.rawName} needs a value`);
      canonical.push(`--${token.name}=${token.value}`);
    } else {
      if (token.value !== undefined) throw new UsageError(`${token.rawName} takes no value`);
      canonical.push(`--${token.name}`);
    }
  }
  return parseArgs({ args: canonical, options, strict: true, allowPositionals: false }).values;
}

/** A comma-separated list, its empty items dropped; absent stays absent (a flag's "all" or its default). */
export const listFlag = (value: string | undefined): string[] | undefined => value?.split(",").filter(Boolean);

function refuse(flag: string, what: string, text: string): never {
  throw new UsageError(`${flag} takes ${what}, not "${text}"`);
}

/** A finite number written as one (not an empty string). */
export function numberFlag(flag: string, text: string): number {
  const n = Number(text);
  if (text.trim() === "" || !Number.isFinite(n)) refuse(flag, "a number", text);
  return n;
}

export function positiveNumber(flag: string, text: string): number {
  const n = Number(text);
  if (!Number.isFinite(n) || n <= 0) refuse(flag, "a positive number", text);
  return n;
}

export function positiveInt(flag: string, text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1) refuse(flag, "a positive integer", text);
  return n;
}

/** An integer from min to max: what keeps a load bounded in count and time whatever the command line says. */
export function intBetween(flag: string, text: string, min: number, max: number): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < min || n > max) refuse(flag, `an integer from ${min} to ${max}`, text);
  return n;
}
