import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";

/**
 * The other routing benchmarks' reports that routing.md's goals table points to: the replica
 * comparison and the feedback demonstration. Each is read when its file is in the results folder;
 * one that is absent is left out, never an error.
 */

export interface RelatedResult {
  command: string;
  file: string;
  /** The report's first heading. */
  title: string;
  /** Its "Command: `…` — date" line, without the command. */
  date: string | null;
  /** Rows of its goals table marked met and not met, when it has one. */
  goals: { met: number; missed: number } | null;
}

export const RELATED: readonly { command: string; file: string }[] = [
  { command: "npm run bench:routing-replicas", file: "routing-replicas.md" },
  { command: "npm run bench:routing-feedback", file: "routing-feedback.md" },
];

export function relatedResults(dir: string): RelatedResult[] {
  const out: RelatedResult[] = [];
  for (const r of RELATED) {
    const path = join(dir, r.file);
    if (existsSync(path)) out.push({ ...r, ...readReport(readFileSync(path, "utf8")) });
  }
  return out;
}

/** What a report says of itself: its title, when it ran, and how many of its goals it met. */
export function readReport(md: string): Pick<RelatedResult, "title" | "date" | "goals"> {
  const lines = md.split("\n");
  const title = lines.find((l) => l.startsWith("# "))?.slice(2).trim() ?? "";
  const date = /^Command: `.*` — (\S+)/m.exec(md)?.[1]?.replace(/\.$/, "") ?? null;
  const start = lines.findIndex((l) => /^## .*goals?/i.test(l));
  let goals: RelatedResult["goals"] = null;
  if (start >= 0) {
    let met = 0;
    let missed = 0;
    for (const line of lines.slice(start + 1)) {
      if (line.startsWith("## ")) break;
      if (!line.startsWith("| ") || line.startsWith("| ---") || line.startsWith("| goal")) continue;
      const cells = line.split("|").map((c) => c.trim());
      if (cells.includes("yes")) met++;
      else if (cells.some((c) => c === "no" || c === "**no**")) missed++;
    }
    goals = met + missed > 0 ? { met, missed } : null;
  }
  return { title, date, goals };
}
