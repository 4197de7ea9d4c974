import { readdirSync, readFileSync } from "node:fs";

/**
 * The workerd processes this process started (the Workers pool's, or an e2e file's gateways: they
 * are children of vitest's forks). Linux only, where CI runs: elsewhere none are found.
 */
export function childWorkerd(): number[] {
  let entries: string[];
  try {
    entries = readdirSync("/proc").filter((p) => /^\d+$/.test(p));
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const p of entries) {
    try {
      // /proc/<pid>/stat: "pid (comm) state ppid …"; comm may hold spaces, so read past its last ")".
      const stat = readFileSync(`/proc/${p}/stat`, "utf8");
      const comm = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      if (comm === "workerd" && ppid === process.pid) out.push(Number(p));
    } catch {
      // Gone already.
    }
  }
  return out;
}

/** A process's resident memory now, in bytes (/proc/<pid>/status's VmRSS). */
export function residentBytes(pid: number): number {
  const kib = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
  if (kib === undefined) throw new Error(`no VmRSS for process ${pid}`);
  return Number(kib) * 1024;
}
