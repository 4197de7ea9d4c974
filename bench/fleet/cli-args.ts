import type { ParseArgsOptionsConfig } from "node:util";
import { numberFlag, parseFlags } from "../harness/argv.ts";
import { OPTION_SPECS, describeDefault, isOptionName, type FleetOptions } from "./options.ts";
import { PRESET_NAMES, isPresetName } from "./presets.ts";

/** Command-line flags of the fleet: every option of FleetOptions as --kebab-case. */

export type ParsedArgs = { help: true } | { help: false; options: Partial<FleetOptions> };

export function flagName(option: string): string {
  return "--" + option.replace(/[A-Z]/g, (c) => "-" + c.toLowerCase());
}

const FLAGS: ParseArgsOptionsConfig = {
  ...Object.fromEntries(Object.keys(OPTION_SPECS).map((name) => [flagName(name).slice(2), { type: "string" as const }])),
  help: { type: "boolean", short: "h" },
};

function optionName(flag: string): string {
  return flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
}

/** Parses `--flag value` and `--flag=value`; throws on an unknown flag or a bad value. */
export function parseFleetArgs(argv: readonly string[]): ParsedArgs {
  const values = parseFlags(argv, FLAGS, "see --help");
  if (values.help === true) return { help: true };
  const options: Partial<FleetOptions> = {};
  for (const [flag, raw] of Object.entries(values)) {
    const name = optionName(flag);
    if (typeof raw === "string" && isOptionName(name)) Object.assign(options, { [name]: parseValue(name, `--${flag}`, raw) });
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
  if (kind === "scheduling-policy") return raw;
  return numberFlag(flag, raw);
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
