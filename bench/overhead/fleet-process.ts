/**
 * The simulated fleet with preset "instant" in a child process of its own: in this process it
 * would share one event loop with the load generators and be measured together with them. Its
 * workers take a request's `priority` (--scheduling-policy priority), for kvgate-priority; a target
 * that sends none is served as before, and an instant worker queues nothing to order.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";

export interface FleetProcess {
  urls: string[];
  pid: number;
  stop(): Promise<void>;
}

const CLI = fileURLToPath(new URL("../fleet/cli.ts", import.meta.url));

export async function startFleetProcess(workers: number): Promise<FleetProcess> {
  const child = spawn(process.execPath, [CLI, "--preset", "instant", "--base-port", "0", "--workers", String(workers), "--scheduling-policy", "priority"], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const urls = await new Promise<string[]>((resolve, reject) => {
    let text = "";
    child.once("exit", (code) => reject(new Error(`fleet exited with ${code} before it was ready`)));
    child.stdout?.on("data", (chunk: Buffer) => {
      text += chunk.toString();
      const lines = text.split("\n").filter((l) => l.startsWith("http://"));
      if (lines.length >= workers) resolve(lines.slice(0, workers));
    });
  });
  return { urls, pid: child.pid as number, stop: () => stopChild(child) };
}

/** SIGTERM to this child only, then wait for it to go. */
export function stopChild(child: ChildProcess, graceMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
    child.once("exit", () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill("SIGTERM");
  });
}
