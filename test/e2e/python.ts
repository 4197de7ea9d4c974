import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const DIR = resolve(import.meta.dirname, "..", "python");
const VENV = resolve(import.meta.dirname, "..", ".venv");
const PYTHON = join(VENV, "bin", "python");

/**
 * The official Python SDK, pinned in test/python/requirements.txt, in a virtualenv of its own
 * (test/.venv, git-ignored): made on the first run, remade when the requirements change.
 */
export async function ensurePython(venv = VENV, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const python = join(venv, "bin", "python");
  const stamp = join(venv, "kvgate-requirements.txt");
  const wanted = await readFile(join(DIR, "requirements.txt"), "utf8");
  if (existsSync(python) && existsSync(stamp) && (await readFile(stamp, "utf8")) === wanted) return python;
  await run("python3", ["-m", "venv", venv], { env }).catch((e: unknown) => {
    // Debian's python3 without python3-venv says so in several lines, on stdout, the last of them
    // "Failing command: …/bin/python3": quoted, that line would not say what is missing.
    // Its words, not "ensurepip" alone: a venv whose ensurepip step failed (a full disk, a noexec
    // mount) names ensurepip too, and no python3-venv would mend that.
    const why = written(e).some((text) => /ensurepip is not\s+available/.test(text)) ? "ensurepip is missing" : lastLine(e);
    throw new Error(cannotMakeVenv(`python3 -m venv failed: ${why}`));
  });
  await run(python, ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", join(DIR, "requirements.txt")], { env }).catch((e: unknown) => {
    throw new Error(cannotMakeVenv(`pip could not install test/python/requirements.txt: ${lastLine(e)}`));
  });
  await writeFile(stamp, wanted);
  return python;
}

/**
 * What the machine lacks, said in one line (the README's quickstart says it too): these tests fail
 * without it, as they must, but they should not leave a newcomer reading python's traceback.
 */
function cannotMakeVenv(why: string): string {
  return `the Python SDK's tests need python3 with venv (Debian, Ubuntu: apt-get install python3-venv; .ci/run installs it), and PyPI on their first run: ${why}`;
}

/** What a failed command wrote, on stderr then on stdout (execFile's error holds both). */
function written(e: unknown): string[] {
  const { stderr, stdout } = e as { stderr?: unknown; stdout?: unknown };
  return [String(stderr ?? "").trim(), String(stdout ?? "").trim()];
}

/**
 * The last line pip wrote on stderr (its "ERROR: …", the one that says what went wrong), else on
 * stdout, else the first line of the error ("Command failed: …").
 */
function lastLine(e: unknown): string {
  const text = written(e).find((t) => t !== "");
  if (text !== undefined) return (text.split("\n").at(-1) as string).trim();
  return (e instanceof Error ? e.message : String(e)).split("\n")[0] as string;
}

/** Runs a script of test/python with `args`; returns what it printed, parsed as JSON. */
export async function runPython<T>(script: string, args: string[]): Promise<T> {
  const { stdout } = await run(PYTHON, [join(DIR, script), ...args], { timeout: 30_000 });
  return JSON.parse(stdout) as T;
}
