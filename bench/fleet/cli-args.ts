import { OPTION_SPECS, describeDefault, isOptionName, type FleetOptions } from "./options.ts";
import { PRESET_NAMES, isPresetName } from "./presets.ts";

/** Command-line flags of the fleet: every option of FleetOptions as --kebab-case. */

export type ParsedArgs = { help: true } | { help: false; options: Partial<FleetOptions> };

export function flagName(option: string): string {
  return "--" + option.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase());
}

function optionName(flag: string): string {
  return flag.slice(2).replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** Parses `--flag value` and `--flag=value`; throws on an unknown flag or a bad value. */
export function parseFleetArgs(argv: readonly string[]): ParsedArgs {
  const options: Partial<FleetOptions> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] ?? "";
    if (arg === "--help" || arg === "-h") return { help: true };
    if (!arg.startsWith("--")) throw new Error(`unexpected argument "${arg}" (see --help)`);
    const eq = arg.indexOf("=");
    const flag = eq === -1 ? arg : arg.slice(0, eq);
    const name = optionName(flag);
    if (!isOptionName(name)) throw new Error(`unknown flag ${flag} (see --help)`);
    const raw = eq === -1 ? argv[++i] : arg.slice(eq + 1);
    if (raw === undefined) throw new Error(`${flag} needs a value`);
    Object.assign(options, { [name]: parseValue(name, flag, raw) });
  }
  return { help: false, options };
}

function parseValue(name: keyof FleetOptions, flag: string, raw: string): string | number {
  const { kind } = OPTION_SPECS[name];
  if (kind === "string") return raw;
  if (kind === "preset") {
    if (!isPresetName(raw)) throw new Error(`${flag} must be one of ${PRESET_NAMES.join(", ")}`);
    return raw;
  }
  if (kind === "fault-target" && raw === "all") return raw;
  const n = Number(raw);
  if (raw.trim() === "" || !Number.isFinite(n)) throw new Error(`${flag} needs a number, got "${raw}"`);
  return n;
}

export function fleetHelp(): string {
  const lines = [
    "Simulated GPU fleet: OpenAI-compatible workers on 127.0.0.1 (see bench/fleet/README.md).",
    "",
    "usage: npm run fleet -- [--flag value ...]",
    "",
  ];
  for (const name of Object.keys(OPTION_SPECS)) {
    if (!isOptionName(name)) continue;
    lines.push(`  ${flagName(name).padEnd(24)}${OPTION_SPECS[name].help}`);
    lines.push(`  ${"".padEnd(24)}default: ${describeDefault(name)}`);
  }
  lines.push(`  ${"--help".padEnd(24)}this text`);
  return lines.join("\n");
}
