/** Where and with what the figures were taken: they only compare within one run on one machine. */
import { availableParallelism, cpus, totalmem } from "node:os";
import { execFileSync } from "node:child_process";
import { createRequire } from "node:module";

export interface MachineInfo {
  cpu: string;
  cores: number;
  memoryGiB: number;
  node: string;
}

export function versionOf(pkg: string): string {
  try {
    return (createRequire(import.meta.url)(`${pkg}/package.json`) as { version: string }).version;
  } catch {
    return "unknown";
  }
}

export function machineInfo(): MachineInfo {
  return {
    cpu: cpus()[0]?.model ?? "unknown",
    cores: availableParallelism(),
    memoryGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
  };
}

/**
 * The gateway's commit, "+dirty" when its code differs from it: the Worker is bundled from the
 * working tree when the run starts, and the tree moves while others work in it.
 */
function kvgateCommit(): string {
  try {
    const git = (args: string[]): string => execFileSync("git", args, { cwd: import.meta.dirname, encoding: "utf8" }).trim();
    const dirty = git(["status", "--porcelain", "--", "../../src", "../../workers", "../../durable-objects", "../../wrangler.toml"]) !== "";
    return `${git(["rev-parse", "--short", "HEAD"])}${dirty ? "+dirty" : ""}`;
  } catch {
    return "unknown";
  }
}

/** The code and tools whose versions shape the figures (peers add theirs when they run). */
export function toolVersions(): Record<string, string> {
  return { kvgate: kvgateCommit(), wrangler: versionOf("wrangler"), miniflare: versionOf("miniflare"), workerd: versionOf("workerd"), autocannon: versionOf("autocannon") };
}
