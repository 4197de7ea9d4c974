import { spawn } from "node:child_process";
import { resolve } from "node:path";

export const ROOT = resolve(import.meta.dirname, "..", "..");

export interface ScriptRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs one of the package's scripts as its npm script does (`node scripts/….ts`, on the Node that
 * runs the tests: the project's Node 22, as npm puts it first on PATH), with `env` in place of
 * the variables a user would set. Variables of the test's own environment that a user would not
 * have set (KVGATE_*) are left out. `cwd`: where it runs, the repository unless another
 * folder stands in for it (a wrangler.toml of the test's own).
 */
export function runScript(script: string, args: readonly string[], env: Record<string, string> = {}, cwd = ROOT): Promise<ScriptRun> {
  return runNode([resolve(ROOT, script), ...args], env, cwd);
}

/** Node (the one running the tests) with `args`, in runScript's environment. */
export function runNode(args: readonly string[], env: Record<string, string> = {}, cwd = ROOT): Promise<ScriptRun> {
  const base = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("KVGATE_")));
  const child = spawn(process.execPath, args, {
    cwd,
    env: { ...base, CLOUDFLARE_CF_FETCH_ENABLED: "false", WRANGLER_SEND_METRICS: "false", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  return new Promise((done, fail) => {
    child.once("error", fail);
    child.once("close", (code) => done({ code, stdout, stderr }));
  });
}
