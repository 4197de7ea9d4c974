/** Starting, checking and stopping a peer gateway's processes. */
import type { ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";

/** A port free on 127.0.0.1 right now (the OS picks it; a peer then binds it). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/** Polls `url` until its answer is `isReady` (by default: a 200), the process dies, or the time is up. */
export async function waitForHttp(
  url: string,
  child: ChildProcess,
  timeoutMs: number,
  isReady: (status: number, body: string) => boolean = (status) => status === 200,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`exited (${child.exitCode ?? child.signalCode}) before answering ${url}`);
    try {
      const res = await fetch(url, { signal: AbortSignal.timeout(2000) });
      if (isReady(res.status, await res.text())) return;
    } catch {
      // Not listening yet.
    }
    await sleep(250);
  }
  throw new Error(`no answer from ${url} within ${timeoutMs / 1000} s`);
}

/**
 * True when every listening socket on `port` is bound to 127.0.0.1 (read from /proc/net): a peer
 * must never be reachable from beyond this machine while it runs with a benchmark's keys.
 */
export function listensOnlyOnLoopback(port: number): boolean {
  const hexPort = port.toString(16).toUpperCase().padStart(4, "0");
  let found = 0;
  for (const file of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(file, "utf8");
    } catch {
      continue;
    }
    for (const line of text.split("\n").slice(1)) {
      const cols = line.trim().split(/\s+/);
      const [addr, p] = (cols[1] ?? "").split(":");
      if (p !== hexPort || cols[3] !== "0A") continue; // 0A = LISTEN
      found++;
      if (addr !== "0100007F") return false;
    }
  }
  return found > 0;
}

/** Stops a peer started with `detached: true`: SIGTERM to its own process group, then SIGKILL. */
export async function stopGroup(child: ChildProcess, graceMs = 10_000): Promise<void> {
  const pid = child.pid;
  if (pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  signalGroup(pid, "SIGTERM");
  const timedOut = await Promise.race([exited.then(() => false), sleep(graceMs).then(() => true)]);
  if (timedOut) {
    signalGroup(pid, "SIGKILL");
    await exited;
  }
  // Workers of the group may outlive their parent for a moment.
  signalGroup(pid, "SIGKILL");
}

function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // The group is gone already.
  }
}
