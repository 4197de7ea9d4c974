import { spawn, type ChildProcess } from "node:child_process";
import net from "node:net";
import { resolve } from "node:path";
import { createInterface } from "node:readline";
import { afterEach, describe, expect, it } from "vitest";
import { ROOT } from "../support/run-script.ts";
import { connect, opened } from "../support/websocket-client.ts";

// `npm start` runs the fleet in the gateway launcher's process: whatever kills the fleet kills the
// quickstart. So the fleet runs here as `npm run fleet` does, in a child, where a crash is the
// child's exit and its stderr rather than the death of vitest's worker.

// Each test starts a Node process: on a shared 2-core machine that can take a while.
const SPAWN_TIMEOUT_MS = 60_000;

interface FleetProcess {
  url: string;
  port: number;
  /** What the fleet wrote to stderr so far (a crash's stack). */
  stderr(): string;
}

const children: ChildProcess[] = [];
afterEach(() => {
  for (const child of children.splice(0)) if (child.exitCode === null) child.kill("SIGKILL");
});

/** `node bench/fleet/cli.ts --workers 1 --base-port 0 --preset instant`, once it printed its URL. */
async function fleetProcess(): Promise<FleetProcess> {
  const child = spawn(process.execPath, [resolve(ROOT, "bench/fleet/cli.ts"), "--workers", "1", "--base-port", "0", "--preset", "instant"], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
  children.push(child);
  let stderr = "";
  child.stderr?.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  const url = await new Promise<string>((done, fail) => {
    createInterface({ input: child.stdout! }).once("line", done);
    child.once("exit", (code) => fail(new Error(`the fleet exited (${code}) before it printed a URL: ${stderr}`)));
  });
  return { url, port: Number(new URL(url).port), stderr: () => stderr };
}

/** The worker's /health status, or the error that reaching it gave (the process is gone). */
async function health(fleet: FleetProcess): Promise<number | string> {
  try {
    return (await fetch(`${fleet.url}/health`)).status;
  } catch (e) {
    return `unreachable: ${String((e as Error).cause ?? e)}; fleet stderr: ${fleet.stderr()}`;
  }
}

/**
 * Writes `request` on a fresh connection; resolves with all the worker answered before it ended
 * the connection. `reset`: then end it with a TCP reset rather than a FIN, as a client that
 * drops its connection abruptly (or whose process is killed) does.
 */
function exchange(port: number, request: string, o: { reset?: boolean } = {}): Promise<string> {
  return new Promise((done) => {
    let reply = "";
    const socket = net.connect({ port, host: "127.0.0.1", allowHalfOpen: true }, () => socket.write(request));
    socket.setEncoding("utf8").on("data", (d: string) => (reply += d));
    socket.on("error", () => {});
    socket.once("end", () => (o.reset ? socket.resetAndDestroy() : socket.end()));
    socket.once("close", () => done(reply));
  });
}

describe("a simulated worker outlives a bad client", () => {
  it("a realtime client that sends a text frame of invalid UTF-8 gets its socket closed with 1007; the worker keeps serving", async () => {
    const fleet = await fleetProcess();
    const s = opened(await connect(`${fleet.url.replace(/^http/, "ws")}/v1/realtime?model=kvgate-sim`));
    await s.event("session.created");
    // e.g. audio bytes sent as a text message by mistake
    s.ws.send(Buffer.from([0x80, 0xff]), { binary: false });
    expect((await s.closed).code).toBe(1007);
    expect(await health(fleet)).toBe(200);
    expect(fleet.stderr()).toBe("");
  }, SPAWN_TIMEOUT_MS);

  it("an upgrade request whose target is not a URL gets a 400; the worker keeps serving", async () => {
    const fleet = await fleetProcess();
    const reply = await exchange(fleet.port, "GET http://[ HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
    expect({ status: reply.split("\r\n")[0], stderr: fleet.stderr() }).toEqual({ status: "HTTP/1.1 400 Bad Request", stderr: "" });
    expect(await health(fleet)).toBe(200);
  }, SPAWN_TIMEOUT_MS);

  it("a client that resets its connection after an upgrade's refusal leaves the worker serving", async () => {
    const fleet = await fleetProcess();
    const reply = await exchange(fleet.port, "GET /v1/elsewhere HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", { reset: true });
    expect(reply.split("\r\n")[0]).toBe("HTTP/1.1 404 Not Found");
    expect(await health(fleet)).toBe(200);
    expect(fleet.stderr()).toBe("");
  }, SPAWN_TIMEOUT_MS);
});
