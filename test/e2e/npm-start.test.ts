import { execFile, spawn, type ChildProcess } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { readdir, readFile, readlink } from "node:fs/promises";
import { resolve } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { freePort } from "../../bench/harness/free-port.ts";
import { readKey } from "../../bench/start/api-key.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");
const HOST = "127.0.0.1";
const run = promisify(execFile);

/** One `npm start` (node bench/start.ts, or npm itself), with what it printed so far. */
interface Started {
  child: ChildProcess;
  stdout: string;
  stderr: string;
  exit: Promise<number | null>;
}

const started: Started[] = [];

/**
 * Starts npm start with `args` and only the port variables in `ports` (none from this shell), in
 * its own process group, so a failed test can still stop everything it started.
 */
function start(args: string[], ports: Record<string, string> = {}, viaNpm = false): Started {
  const env: NodeJS.ProcessEnv = { ...process.env, ...ports };
  for (const name of ["PORT", "KVGATE_PORT", "KVGATE_FLEET_PORT"]) if (!(name in ports)) delete env[name];
  const [command, argv] = viaNpm ? ["npm", ["start", "--silent", "--", ...args]] : [process.execPath, ["bench/start.ts", ...args]];
  const child = spawn(command, argv, { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
  const s: Started = { child, stdout: "", stderr: "", exit: new Promise((done) => child.once("exit", (code) => done(code))) };
  child.stdout?.setEncoding("utf8").on("data", (d: string) => (s.stdout += d));
  child.stderr?.setEncoding("utf8").on("data", (d: string) => (s.stderr += d));
  started.push(s);
  return s;
}

/** The printed banner, once the last key line and the line under it are out. */
function banner(s: Started, timeoutMs: number): Promise<string> {
  return new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`no banner within ${timeoutMs} ms; stdout: ${s.stdout}; stderr: ${s.stderr}`)), timeoutMs);
    const check = (): void => {
      if (readKey(s.stdout, "register") !== null && s.stdout.includes("Ctrl-C stops")) {
        clearTimeout(timer);
        done(s.stdout);
      }
    };
    s.child.stdout?.on("data", check);
    void s.exit.then(() => fail(new Error(`npm start exited; stdout: ${s.stdout}; stderr: ${s.stderr}`)));
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

async function groupGone(pid: number): Promise<boolean> {
  for (let i = 0; i < 50 && groupAlive(pid); i++) await new Promise((r) => setTimeout(r, 100));
  return !groupAlive(pid);
}

/** What npm start wrote on stderr, as lines, without npm's own warnings about this machine's npm config. */
const stderrLines = (s: Started): string[] => s.stderr.split("\n").filter((l) => l !== "" && !l.startsWith("npm warn"));

const upUrl = (text: string): string => /kvgate is up on (http:\/\/\S+)/.exec(text)?.[1] as string;

/** The command lines of every process in npm start's group, as `ps` shows them to any local user. */
async function groupCommandLines(s: Started): Promise<string[]> {
  const { stdout: table } = await run("ps", ["-eo", "pgid=,args="], { maxBuffer: 16 * 1024 * 1024 });
  return table.split("\n").filter((l) => l.trim().split(/\s+/)[0] === String(s.child.pid));
}

/**
 * The TCP ports the processes of npm start's group listen on, as any local user may connect to
 * them: each process's sockets (/proc/PID/fd) found among the listening ones (/proc/net/tcp, tcp6).
 */
async function groupListeningPorts(s: Started): Promise<number[]> {
  const { stdout: table } = await run("ps", ["-eo", "pid=,pgid="]);
  const pids = table.split("\n").map((l) => l.trim().split(/\s+/)).filter(([, pgid]) => pgid === String(s.child.pid)).map(([pid]) => pid as string);
  const inodes = new Set<string>();
  for (const pid of pids) {
    const fds = await readdir(`/proc/${pid}/fd`).catch(() => []);
    for (const fd of fds) {
      const link = await readlink(`/proc/${pid}/fd/${fd}`).catch(() => "");
      const inode = /^socket:\[(\d+)\]$/.exec(link)?.[1];
      if (inode !== undefined) inodes.add(inode);
    }
  }
  const ports = new Set<number>();
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    const rows = (await readFile(file, "utf8").catch(() => "")).split("\n").slice(1);
    for (const row of rows) {
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode; st 0A is LISTEN.
      const cols = row.trim().split(/\s+/);
      if (cols[3] === "0A" && inodes.has(cols[9] as string)) ports.add(parseInt((cols[1] as string).split(":")[1] as string, 16));
    }
  }
  return [...ports];
}

/** What a DevTools client reads first from a port: the debugging targets it offers, if it is a debugger. */
async function debuggerTargets(port: number): Promise<string | null> {
  try {
    const res = await fetch(`http://${HOST}:${port}/json/list`, { signal: AbortSignal.timeout(2000) });
    const text = await res.text();
    return text.includes("webSocketDebuggerUrl") ? text : null;
  } catch {
    // Not HTTP, or not answering: no DevTools client gets in there.
    return null;
  }
}

/** The file the gateway reads npm start's keys from (its --env-file), or undefined. */
const envFileOf = (gatewayLine: string): string | undefined => / --env-file (\S+)/.exec(gatewayLine)?.[1];

// The copy most tests share: the gateway on a free port given as PORT, the fleet on free ports
// given as --fleet-port 0, so it never takes a running copy's 8787 and 9001–9004.
let main: Started;
let mainPort: number;
/** The file main's gateway reads its keys from (--env-file), once a test found it. */
let mainKeysFile: string | undefined;

beforeAll(async () => {
  mainPort = await freePort(HOST);
  main = start(["--fleet-port", "0"], { PORT: String(mainPort) });
});
afterAll(() => {
  for (const { child } of started) if (child.pid !== undefined && groupAlive(child.pid)) process.kill(-child.pid, "SIGKILL");
});

describe("npm start", () => {
  it("prints a key that the gateway takes, once, on a line of its own, and a curl example that works as printed", async () => {
    const text = await banner(main, 45_000);
    const key = readKey(text, "api") as string;
    expect(text.split("\n")).toContain(`KVGATE_API_KEY=${key}`);
    expect(text.split(key).length - 1).toBe(1);
    expect(main.stderr).not.toContain(key);

    const url = upUrl(text);
    const refused = await fetch(`${url}/v1/models`);
    expect(refused.status).toBe(401);

    // The example exactly as printed, run by a shell with the key exported from the printed line.
    const curl = text.slice(text.indexOf("curl -N"), text.indexOf("\n\nThe admin API")).replace(/^ {2}/gm, "");
    const { stdout: streamed } = await run("sh", ["-c", curl], { env: { ...process.env, KVGATE_API_KEY: key }, timeout: 20_000 });
    expect(streamed).toContain('"choices"');
    expect(streamed).toContain("data: [DONE]");

    // The request's log line, as a person reads it: time, status, endpoint, group → backend, reason, blocks, times, caller.
    await vi.waitFor(() => expect(main.stdout).toMatch(/^\d\d:\d\d:\d\d 200 chat \S+ → \S+ [a-z-]+ \d+\/\d+ ttft \d+ ms \d+ ms master$/m), { timeout: 10_000, interval: 100 });
    expect(main.stdout).not.toContain('{"type":"request"');
    // The key stays on its one line of the banner.
    expect(main.stdout.split(key).length - 1).toBe(1);
  }, 60_000);

  it("prints the admin and register keys, each once, on a line of its own, and none of them is the client key", async () => {
    const text = await banner(main, 45_000);
    const lines = text.split("\n");
    const keys = { api: readKey(text, "api"), admin: readKey(text, "admin"), register: readKey(text, "register") };
    expect(lines).toContain(`KVGATE_ADMIN_KEY=${keys.admin}`);
    expect(lines).toContain(`KVGATE_REGISTER_KEY=${keys.register}`);
    expect(new Set(Object.values(keys)).size).toBe(3);
    for (const key of [keys.admin, keys.register] as string[]) {
      expect(key).toMatch(/^sk-kvgate-dev-[0-9a-f]{48}$/);
      expect(text.split(key).length - 1).toBe(1);
      expect(main.stderr).not.toContain(key);
      // Not a client key: the gateway does not take it for /v1.
      expect((await fetch(`${upUrl(text)}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).status).toBe(401);
    }
  }, 60_000);

  it("keeps its keys off every command line: ps shows none of them, the gateway reads them from a file only this user can read", async () => {
    const text = await banner(main, 45_000);
    const keys = [readKey(text, "api"), readKey(text, "admin"), readKey(text, "register")] as string[];
    // Every process npm start started is in its group; `ps` is what any local user can run.
    const commandLines = await groupCommandLines(main);
    const gateway = commandLines.find((l) => l.includes("bench/start/dev-worker.ts")) as string;
    expect(gateway, commandLines.join("\n")).toBeDefined();
    for (const key of keys) expect(commandLines.filter((l) => l.includes(key)), key).toEqual([]);
    mainKeysFile = envFileOf(gateway);
    expect(mainKeysFile, gateway).toBeDefined();
    expect(statSync(mainKeysFile as string).mode & 0o777).toBe(0o600);
    expect(statSync(resolve(mainKeysFile as string, "..")).mode & 0o777).toBe(0o700);
  }, 60_000);

  it("leaves no debugger listening: no port of its processes offers a DevTools target, through which any local user could read the keys", async () => {
    const text = await banner(main, 45_000);
    const ports = await groupListeningPorts(main);
    // The gateway's own port is among them: the listing sees what npm start opened.
    expect(ports).toContain(mainPort);
    const debuggers: string[] = [];
    for (const port of ports) {
      const targets = await debuggerTargets(port);
      if (targets !== null) debuggers.push(`${port}: ${targets.slice(0, 200)}`);
    }
    expect(debuggers).toEqual([]);
    // Nor workerd's debug port, which speaks Cap'n Proto, not HTTP: it would hand out the Worker's Durable Objects.
    expect((await groupCommandLines(main)).filter((l) => /--inspector-addr|--debug-port/.test(l))).toEqual([]);
    // And the gateway still answers with this run's key, the keys read from the file.
    const res = await fetch(`${upUrl(text)}/v1/models`, { headers: { authorization: `Bearer ${readKey(text, "api")}` } });
    expect(res.status).toBe(200);
  }, 60_000);

  it("shows a request whose path holds escape sequences with them written out: a client cannot rewrite the terminal", async () => {
    const text = await banner(main, 45_000);
    // Any web page the developer opens can send this to the local gateway.
    const res = await fetch(`${upUrl(text)}/v1/%1B%5B2J%1B%5B31mowned%1B%5B0m`, { method: "POST" });
    expect(res.status).toBe(401);
    await vi.waitFor(() => expect(main.stdout).toMatch(/^\d\d:\d\d:\d\d 401 .*owned/m), { timeout: 10_000, interval: 100 });
    const shown = main.stdout.split("\n").find((l) => l.includes("owned")) as string;
    expect(shown).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
    expect(shown).toContain("\\u001b[31mowned");
  }, 60_000);

  it("serves on the port PORT names", async () => {
    const text = await banner(main, 45_000);
    expect(upUrl(text)).toBe(`http://${HOST}:${mainPort}`);
    expect((await fetch(`http://${HOST}:${mainPort}/health`)).ok).toBe(true);
  }, 60_000);

  it("serves on the port --port names, through npm start -- --port, over PORT", async () => {
    const port = await freePort(HOST);
    const other = start(["--port", String(port)], { PORT: String(mainPort), KVGATE_FLEET_PORT: "0" }, true);
    const text = await banner(other, 45_000);
    expect(upUrl(text)).toBe(`http://${HOST}:${port}`);
    const res = await fetch(`http://${HOST}:${port}/v1/models`, { headers: { authorization: `Bearer ${readKey(text, "api")}` } });
    expect(res.status).toBe(200);

    const pid = other.child.pid as number;
    process.kill(-pid, "SIGTERM");
    await other.exit;
    expect(await groupGone(pid)).toBe(true);
  }, 60_000);

  it("says in one line that the gateway's port is taken, exits non-zero and leaves nothing running", async () => {
    await banner(main, 45_000);
    const second = start(["--port", String(mainPort)], { KVGATE_FLEET_PORT: "0" }, true);
    expect(await second.exit).not.toBe(0);
    expect(stderrLines(second)).toEqual([`kvgate: port ${mainPort} is already in use; pick another with --port or PORT`]);
    expect(second.stdout.trim()).toBe("");
    expect(await groupGone(second.child.pid as number)).toBe(true);
  }, 60_000);

  it("says in one line that the fleet's port is taken, exits non-zero and leaves nothing running", async () => {
    const text = await banner(main, 45_000);
    const fleetPort = Number(/simulated GPU fleet: http:\/\/[\d.]+:(\d+)/.exec(text)?.[1]);
    const second = start(["--port", "0", "--fleet-port", String(fleetPort)]);
    expect(await second.exit).not.toBe(0);
    const lines = stderrLines(second);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(new RegExp(`^kvgate: port ${fleetPort} is already in use \\(the simulated fleet takes ${fleetPort}–${fleetPort + 3}\\); pick others with --fleet-port or KVGATE_FLEET_PORT$`));
    expect(await groupGone(second.child.pid as number)).toBe(true);
  }, 60_000);

  it("refuses a bad flag value in one line, with a non-zero exit", async () => {
    const bad = start(["--port", "eighty"]);
    expect(await bad.exit).not.toBe(0);
    expect(stderrLines(bad)).toEqual(['kvgate: --port must be a port (0–65535, 0 for a free one), not "eighty"']);
    const unknown = start(["--prot", "9000"]);
    expect(await unknown.exit).not.toBe(0);
    expect(stderrLines(unknown)).toHaveLength(1);
    expect(stderrLines(unknown)[0]).toMatch(/^kvgate: unknown argument --prot/);
  });

  it("refuses, in one line and at once, a port browsers and fetch will not connect to, and starts nothing", async () => {
    // 6000 is a Fetch "bad port": wrangler would serve on it, curl would reach it, but fetch (npm
    // start's own readiness check, the CLI, the dashboard in a browser) never would.
    const bad = start(["--port", "6000", "--fleet-port", "0"]);
    expect(await bad.exit).not.toBe(0);
    expect(stderrLines(bad)).toEqual([`kvgate: port 6000 is one that browsers and fetch refuse to connect to (the Fetch standard's "bad ports"); pick another with --port or PORT`]);
    expect(bad.stdout).toBe("");
    expect(await groupGone(bad.child.pid as number)).toBe(true);
  }, 20_000);

  it("prints its usage with --help and starts nothing", async () => {
    const help = start(["--help"]);
    expect(await help.exit).toBe(0);
    expect(help.stdout).toContain("usage: npm start -- [--port N] [--fleet-port N]");
    expect(help.stdout).not.toContain("simulated GPU fleet:");
  });

  it("removes the file that holds its keys when its terminal closes (SIGHUP to the whole group)", async () => {
    const other = start(["--port", "0", "--fleet-port", "0"]);
    await banner(other, 45_000);
    const keysFile = envFileOf((await groupCommandLines(other)).join("\n"));
    expect(keysFile).toBeDefined();
    const folder = resolve(keysFile as string, "..");
    expect(existsSync(folder)).toBe(true);

    // What a closed terminal window or a lost ssh session sends every process of the job.
    const pid = other.child.pid as number;
    process.kill(-pid, "SIGHUP");
    await other.exit;
    expect(await groupGone(pid)).toBe(true);
    expect(existsSync(folder)).toBe(false);
  }, 60_000);

  it("takes the gateway down with it when it dies of its own output (a closed pipe: `npm start | head`), and leaves no keys", async () => {
    const other = start(["--port", "0", "--fleet-port", "0"]);
    const url = upUrl(await banner(other, 45_000));
    const keysFile = envFileOf((await groupCommandLines(other)).join("\n"));
    expect(keysFile).toBeDefined();
    // The reader goes: npm start's next line (a request's) meets a closed pipe, an error nothing handles.
    other.child.stdout?.destroy();
    const pid = other.child.pid as number;
    for (let i = 0; i < 50 && other.child.exitCode === null; i++) {
      await fetch(`${url}/v1/models`).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(await other.exit).not.toBe(0);
    expect(await groupGone(pid)).toBe(true);
    expect(existsSync(resolve(keysFile as string, ".."))).toBe(false);
  }, 60_000);

  it("stops the gateway and the fleet when npm itself is sent SIGTERM, as a script's kill $! or a supervisor sends it", async () => {
    const viaNpm = start(["--port", "0", "--fleet-port", "0"], {}, true);
    await banner(viaNpm, 45_000);
    const pid = viaNpm.child.pid as number;
    // To npm alone, not its group: npm passes it to the script's process, which must stop what it started.
    viaNpm.child.kill("SIGTERM");
    await viaNpm.exit;
    expect(await groupGone(pid)).toBe(true);
  }, 60_000);

  it("stops the gateway and the fleet on SIGTERM", async () => {
    const pid = main.child.pid as number;
    main.child.kill("SIGTERM");
    expect(await main.exit).toBe(0);
    // The gateway and its workerd are gone with it.
    expect(await groupGone(pid)).toBe(true);
    // And the file that held its keys, folder and all.
    if (mainKeysFile !== undefined) expect(existsSync(resolve(mainKeysFile, ".."))).toBe(false);
  }, 20_000);
});
