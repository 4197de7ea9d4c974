import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { CliError } from "../../cli/cli-error.ts";
import { commandLine, USAGE } from "../../cli/main.ts";

/**
 * Each command takes its own flags only (cli/main.ts): every flag the README's examples and the
 * usage text give a command must be one it takes, or the line as documented would be refused.
 */

const README = readFileSync(new URL("../../README.md", import.meta.url), "utf8");

/** The README's `npx kvgate …` command lines in its sh blocks, a continued line joined, comments cut off, `a && b` as two. */
function readmeCommandLines(): string[][] {
  const blocks = [...README.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => (m[1] as string).replace(/\\\n\s*/g, " "));
  return blocks
    .flatMap((b) => b.split("\n"))
    .flatMap((line) => line.replace(/\s#.*$/, "").split("&&"))
    .map((cmd) => cmd.replace(/>.*$/, "").trim())
    .filter((cmd) => cmd.startsWith("npx kvgate "))
    .map((cmd) => cmd.split(/\s+/).slice(2));
}

/** The usage text's lines as command lines: `[--flag X]` and `--flag X` taken as given, `|`-choices as their first, ID as an id. */
function usageCommandLines(): string[][] {
  const lines: string[] = [];
  for (const l of USAGE.split("\n")) {
    if (/^ {2}[a-z]/.test(l)) lines.push(l.trim().split(/\s{2,}/)[0] as string);
    // A command's flags go on under it, indented to them (its explanation, further in, starts with a word).
    else if (/^ {3,}\[/.test(l) && lines.length > 0) lines[lines.length - 1] += ` ${l.trim()}`;
  }
  return lines.map((l) =>
    l
      .replace(/[[\]]/g, " ")
      .replace(/(\S+)\|\S+/g, "$1")
      .split(/\s+/)
      .filter((w) => w !== "")
      .map((w) => (w === "ID" ? "key_x" : w)),
  );
}

function refusal(argv: readonly string[]): string | null {
  try {
    commandLine(argv);
    return null;
  } catch (e) {
    return e instanceof CliError ? e.message : String(e);
  }
}

describe("the flags npx kvgate's commands take", () => {
  it("take every command line the README's examples show", () => {
    const lines = readmeCommandLines();
    expect(lines.length).toBeGreaterThan(15);
    for (const argv of lines) expect({ argv, refused: refusal([...argv, "--json"]) }).toEqual({ argv, refused: null });
  });

  it("take every flag the usage text gives each command", () => {
    const lines = usageCommandLines();
    // keys update's line says "[the create flags]": create's line stands for it, and is run as update too.
    const create = lines.find((l) => l[0] === "keys" && l[1] === "create") ?? [];
    expect(create).toContain("--no-usage");
    expect(lines.length).toBeGreaterThan(15);
    const update = ["keys", "update", "key_x", ...create.slice(2)];
    for (const argv of lines.map((l) => (l[1] === "update" && l[0] === "keys" ? update : l))) expect({ argv, refused: refusal(argv) }).toEqual({ argv, refused: null });
  });

  it("refuse a flag of another command, naming it and the command's own flag it is near", () => {
    expect(refusal(["keys", "create", "--model", "m"])).toBe("keys create does not take --model (did you mean --models?)");
    expect(refusal(["deployments", "drain", "--group", "g", "--id", "x", "--file", "f"])).toBe("deployments drain does not take --file");
    expect(refusal(["fleet", "export", "--json"])).toBeNull();
  });
});
