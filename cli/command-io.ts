import type { AdminClient } from "./admin-client.ts";

/** The flags a command may be given (all strings as typed; each command checks its own). */
export interface Flags {
  group?: string;
  id?: string;
  url?: string;
  model?: string;
  "max-in-flight"?: string;
  weight?: string;
  "api-key-env"?: string;
  file?: string;
  wait?: boolean;
  timeout?: string;
  json?: boolean;
  // Virtual keys (cli/keys.ts).
  models?: string;
  rpm?: string;
  tpm?: string;
  "max-parallel"?: string;
  "budget-tokens"?: string;
  "budget-usd"?: string;
  period?: string;
  origins?: string;
  expires?: string;
  name?: string;
  team?: string;
  user?: string;
  "no-usage"?: boolean;
  usage?: boolean;
  key?: string;
  since?: string;
  until?: string;
  status?: string;
}

/** A flag's name, as typed after "--". */
export type Flag = keyof Flags;

/** The flags every command takes beside its own: --json, and --help (which prints the usage instead). */
export const EVERY_COMMAND_FLAGS: readonly Flag[] = ["json"];

export interface Io {
  out(text: string): void;
  /** Progress lines (never part of --json output). */
  note(text: string): void;
  sleep(ms: number): Promise<void>;
}

/** One command: `args` are its positional arguments (cli/main.ts checks their number). */
export type Command = (api: AdminClient, flags: Flags, io: Io, args: readonly string[]) => Promise<void>;

/** A table of commands by name: each a Command, and its names known, so the table of their flags must name each. */
export const commandTable = <Name extends string>(table: Record<Name, Command>): Record<Name, Command> => table;

/** The admin API's answer as JSON with --json, else the human text. */
export function show(io: Io, flags: Flags, json: unknown, human: () => string): void {
  io.out(flags.json ? JSON.stringify(json, null, 2) : human());
}
