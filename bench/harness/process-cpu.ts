/**
 * CPU time of the workerd process serving one target, from /proc (Linux). Each Miniflare runs
 * its own workerd, so a target's process is the one that appeared when it started.
 */
import { readdirSync, readFileSync } from "node:fs";

/** Clock ticks per second of /proc/<pid>/stat's utime and stime (USER_HZ, 100 on Linux). */
const TICKS_PER_SECOND = 100;

/**
 * The workerd processes this process started (Miniflare spawns each as its child): not another
 * test run's or benchmark's on the same machine, which may start one at the same moment.
 */
export function workerdPids(): Set<number> {
  const pids = new Set<number>();
  let entries: string[];
  try {
    entries = readdirSync("/proc");
  } catch {
    return pids;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/comm`, "utf8").trim().startsWith("workerd") && parentOf(entry) === process.pid) pids.add(Number(entry));
    } catch {
      // Gone between the listing and the read.
    }
  }
  return pids;
}

/** The parent's pid, from /proc/<pid>/stat. */
function parentOf(pid: string): number {
  return Number(statFields(readFileSync(`/proc/${pid}/stat`, "utf8"))[1]);
}

/** The workerd started since `before` was taken; null when there is not exactly one. */
export function newWorkerd(before: Set<number>): number | null {
  const added = [...workerdPids()].filter((p) => !before.has(p));
  return added.length === 1 ? (added[0] as number) : null;
}

/**
 * Starts what brings up its own workerd and names the process that serves it: the Worker's
 * process when it says its processes (served apart), else the one workerd that appeared; null
 * when that cannot be told.
 */
export async function servedBy<T extends { pids?: { worker: number } }>(start: () => Promise<T>): Promise<{ served: T; pid: number | null }> {
  const before = workerdPids();
  const served = await start();
  return { served, pid: served.pids?.worker ?? newWorkerd(before) };
}

/** A meter of the CPU time the process uses from now on: each call gives the ms since. */
export function cpuSince(pid: number): () => number {
  const start = cpuMs(pid);
  return () => cpuMs(pid) - start;
}

/** User plus system CPU time the process has used, in ms. */
export function cpuMs(pid: number): number {
  return statCpuMs(readFileSync(`/proc/${pid}/stat`, "utf8"));
}

/** utime + stime of a /proc/<pid>/stat line, in ms. */
export function statCpuMs(stat: string): number {
  const fields = statFields(stat);
  const utime = Number(fields[11]);
  const stime = Number(fields[12]);
  if (!Number.isFinite(utime) || !Number.isFinite(stime)) throw new Error(`unreadable /proc stat line: ${stat.slice(0, 80)}`);
  return ((utime + stime) * 1000) / TICKS_PER_SECOND;
}

/** A /proc/<pid>/stat line's fields from the state on (field 3): after the parenthesised command name, which may itself hold spaces and parentheses. */
function statFields(stat: string): string[] {
  return stat.slice(stat.lastIndexOf(")") + 2).split(" ");
}
