import { execFile, spawn, type ChildProcess } from "node:child_process";
import { freePort } from "../../bench/harness/free-port.ts";
import { readKey } from "../../bench/start/api-key.ts";
import { ROOT } from "../support/run-script.ts";

/**
 * `npm start` (the gateway on wrangler's dev server in front of the simulated fleet) and the CLI run as
 * a user types it (`npx kvgate …`), for the tests that go the newcomer's way.
 */

const HOST = "127.0.0.1";

export interface NpmStart {
  url: string;
  /** The keys it printed: the clients' (master) key, the admin key, the register key. */
  keys: { api: string; admin: string; register: string };
  /** Ends npm start and every process it started (they share its process group). */
  stop(): void;
}

export async function npmStart(): Promise<NpmStart> {
  const port = await freePort(HOST);
  const child: ChildProcess = spawn(process.execPath, ["bench/start.ts", "--port", String(port), "--fleet-port", "0"], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], detached: true });
  const stop = () => {
    if (child.pid === undefined) return;
    try {
      process.kill(-child.pid, "SIGTERM");
    } catch {
      // Already gone.
    }
  };
  let out = "";
  let err = "";
  child.stderr?.setEncoding("utf8").on("data", (d: string) => (err += d));
  await new Promise<void>((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`npm start printed no banner; stdout: ${out}; stderr: ${err}`)), 50_000);
    child.stdout?.setEncoding("utf8").on("data", (d: string) => {
      out += d;
      if (out.includes("Ctrl-C stops")) {
        clearTimeout(timer);
        done();
      }
    });
    child.once("exit", () => fail(new Error(`npm start exited; stdout: ${out}; stderr: ${err}`)));
  }).catch((e: unknown) => {
    stop();
    throw e;
  });
  const url = /kvgate is up on (http:\/\/\S+)/.exec(out)?.[1] as string;
  return { url, keys: { api: readKey(out, "api") as string, admin: readKey(out, "admin") as string, register: readKey(out, "register") as string }, stop };
}

export interface Ran {
  code: number;
  stdout: string;
  /** stderr without npm's own warnings about this machine's npm config. */
  stderr: string[];
}

/** `npx kvgate <args>` in the repository, with KVGATE_URL and KVGATE_ADMIN_KEY as given (and any other variable `env` names). */
export function kvgate(args: readonly string[], env: { KVGATE_URL: string; KVGATE_ADMIN_KEY: string } & Record<string, string>): Promise<Ran> {
  return new Promise((done) => {
    execFile("npx", ["kvgate", ...args], { cwd: ROOT, env: { ...process.env, ...env }, timeout: 30_000 }, (error, stdout, stderr) => {
      const code = error === null ? 0 : typeof error.code === "number" ? error.code : 1;
      done({ code, stdout, stderr: stderr.split("\n").filter((l) => l !== "" && !l.startsWith("npm warn")) });
    });
  });
}
