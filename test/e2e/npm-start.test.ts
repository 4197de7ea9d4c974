import { execFile, spawn, type ChildProcess } from "node:child_process";
import { resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { readApiKey } from "../../bench/start/api-key.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");
const run = promisify(execFile);

// `npm start` itself (node bench/start.ts), on ports the OS picks so it never takes a running
// copy's 8787 and 9001–9004, and with its own Durable Object state, as every run has.
let child: ChildProcess;
let stdout = "";
let stderr = "";
let exit: Promise<number | null>;

/** The printed banner, once the key line and the curl example under it are out. */
function banner(timeoutMs: number): Promise<string> {
  return new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`no banner within ${timeoutMs} ms; stdout: ${stdout}; stderr: ${stderr}`)), timeoutMs);
    const check = (): void => {
      if (readApiKey(stdout) !== null && stdout.includes("Ctrl-C stops")) {
        clearTimeout(timer);
        done(stdout);
      }
    };
    child.stdout?.on("data", check);
    void exit.then(() => fail(new Error(`npm start exited; stdout: ${stdout}; stderr: ${stderr}`)));
    check();
  });
}

/** Every process npm start started is in its group; none may outlive it. */
function groupAlive(pid: number): boolean {
  try {
    process.kill(-pid, 0);
    return true;
  } catch {
    return false;
  }
}

beforeAll(() => {
  child = spawn(process.execPath, ["bench/start.ts"], {
    cwd: ROOT,
    env: { ...process.env, KVGATE_PORT: "0", KVGATE_FLEET_PORT: "0" },
    stdio: ["ignore", "pipe", "pipe"],
    // Its own process group, so a failed test can still stop everything it started.
    detached: true,
  });
  child.stdout?.setEncoding("utf8").on("data", (d: string) => (stdout += d));
  child.stderr?.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  exit = new Promise((done) => child.once("exit", (code) => done(code)));
});
afterAll(() => {
  if (child.pid !== undefined && groupAlive(child.pid)) process.kill(-child.pid, "SIGKILL");
});

describe("npm start", () => {
  it("prints a key that the gateway takes, once, on a line of its own, and a curl example that works as printed", async () => {
    const text = await banner(45_000);
    const key = readApiKey(text) as string;
    expect(text.split("\n")).toContain(`KVGATE_API_KEY=${key}`);
    expect(text.split(key).length - 1).toBe(1);
    expect(stderr).not.toContain(key);

    const url = /kvgate is up on (http:\/\/\S+)/.exec(text)?.[1] as string;
    const refused = await fetch(`${url}/v1/models`);
    expect(refused.status).toBe(401);

    // The example exactly as printed, run by a shell with the key exported from the printed line.
    const curl = text.slice(text.indexOf("curl -N"), text.indexOf("\n\nCtrl-C")).replace(/^ {2}/gm, "");
    const { stdout: streamed } = await run("sh", ["-c", curl], { env: { ...process.env, KVGATE_API_KEY: key }, timeout: 20_000 });
    expect(streamed).toContain('"choices"');
    expect(streamed).toContain("data: [DONE]");
  }, 60_000);

  it("stops the gateway and the fleet on SIGTERM", async () => {
    const pid = child.pid as number;
    child.kill("SIGTERM");
    expect(await exit).toBe(0);
    // wrangler dev and its workerd are gone with it.
    for (let i = 0; i < 50 && groupAlive(pid); i++) await new Promise((r) => setTimeout(r, 100));
    expect(groupAlive(pid)).toBe(false);
  }, 20_000);
});
