import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);
const DIR = resolve(import.meta.dirname, "..", "python");
const VENV = resolve(import.meta.dirname, "..", ".venv");
const PYTHON = join(VENV, "bin", "python");
const STAMP = join(VENV, "kvgate-requirements.txt");

/**
 * The official Python SDK, pinned in test/python/requirements.txt, in a virtualenv of its own
 * (test/.venv, git-ignored): made on the first run, remade when the requirements change.
 */
export async function ensurePython(): Promise<string> {
  const wanted = await readFile(join(DIR, "requirements.txt"), "utf8");
  if (existsSync(PYTHON) && existsSync(STAMP) && (await readFile(STAMP, "utf8")) === wanted) return PYTHON;
  await run("python3", ["-m", "venv", VENV]);
  await run(PYTHON, ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-r", join(DIR, "requirements.txt")]);
  await writeFile(STAMP, wanted);
  return PYTHON;
}

/** Runs a script of test/python with `args`; returns what it printed, parsed as JSON. */
export async function runPython<T>(script: string, args: string[]): Promise<T> {
  const { stdout } = await run(PYTHON, [join(DIR, script), ...args], { timeout: 30_000 });
  return JSON.parse(stdout) as T;
}
