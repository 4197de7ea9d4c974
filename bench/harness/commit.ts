import { execFileSync } from "node:child_process";
import { basename } from "node:path";

/** The short commit of a checkout, or its folder's name when it is not a git checkout. */
export function commitOf(dir: string): string {
  try {
    return execFileSync("git", ["-C", dir, "rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim();
  } catch {
    return basename(dir);
  }
}
