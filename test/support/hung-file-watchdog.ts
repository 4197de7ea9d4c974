import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, relative } from "node:path";
import type { Reporter, TestCase, TestModule, TestSuite, Vitest } from "vitest/node";
import { childWorkerd } from "./workerd-processes.ts";

/**
 * A test in the Workers pool runs in the same isolate as the Durable Objects it calls. If that
 * isolate is kept busy (a loop that does not end, in a test or in the object), no timer in it
 * fires: vitest's testTimeout never ends the test, the file never ends, and the run waits forever
 * — once in CI, until the job's own limit ended it with no word of where it stood. This reporter
 * bounds the time between two signs of progress (a test, a hook, the file collected or ended) of
 * a Workers file that has begun: past the limit, it stops the pool's workerd (the pool fails the
 * file running there and goes on with the others), says so, and writes the files left unfinished
 * and those that failed otherwise, so `.ci/run` can tell a hang from a failure. A file waiting
 * for its turn has sent no sign yet and is not timed.
 */

/** A Workers test times out at 15 s and the longest file takes ~16 s on a 2-core machine: a hang is far past it. */
const DEFAULT_LIMIT_S = 180;
const CHECK_EVERY_MS = 1_000;
/** Where the last run's report is written, under the root (in node_modules: git-ignored); KVGATE_HUNG_REPORT elsewhere. */
export const HUNG_REPORT = "node_modules/.cache/kvgate/hung-test-files.json";
const WATCHED_PROJECT = "workers";

export interface HungReport {
  /** Workers files left unfinished after the watchdog stopped the pool's workerd. */
  stopped: string[];
  /** Files that failed for any other reason. */
  failed: string[];
}

export default class HungFileWatchdog implements Reporter {
  private readonly limitMs = Number(process.env.KVGATE_TEST_FILE_LIMIT_S ?? DEFAULT_LIMIT_S) * 1000;
  /** Files begun and not ended, each with the time of its last sign of progress. */
  private readonly running = new Map<string, number>();
  private stops = 0;
  private timer: ReturnType<typeof setInterval> | undefined;
  private root = process.cwd();

  onInit(vitest: Vitest): void {
    this.root = vitest.config.root;
    this.timer = setInterval(() => this.check(), CHECK_EVERY_MS);
    this.timer.unref();
  }

  onTestModuleCollected(m: TestModule): void {
    this.progress(m);
  }

  onTestModuleStart(m: TestModule): void {
    this.progress(m);
  }

  onTestModuleEnd(m: TestModule): void {
    this.running.delete(m.moduleId);
  }

  onTestCaseReady(t: TestCase): void {
    this.progress(t.module);
  }

  onTestCaseResult(t: TestCase): void {
    this.progress(t.module);
  }

  onHookStart(h: { entity: TestCase | TestSuite | TestModule }): void {
    this.progress(h.entity.type === "module" ? h.entity : h.entity.module);
  }

  onHookEnd(h: { entity: TestCase | TestSuite | TestModule }): void {
    this.onHookStart(h);
  }

  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    clearInterval(this.timer);
    const rel = (m: TestModule) => relative(this.root, m.moduleId);
    const left = (m: TestModule) => this.stops > 0 && this.watched(m) && !ended(m);
    const report: HungReport = { stopped: modules.filter(left).map(rel), failed: modules.filter((m) => m.state() === "failed").map(rel) };
    const path = process.env.KVGATE_HUNG_REPORT ?? `${this.root}/${HUNG_REPORT}`;
    mkdirSync(dirname(path), { recursive: true });
    writeFileSync(path, `${JSON.stringify(report)}\n`);
  }

  private watched(m: TestModule): boolean {
    return m.project.name === WATCHED_PROJECT;
  }

  private progress(m: TestModule): void {
    if (this.watched(m) && !ended(m)) this.running.set(m.moduleId, Date.now());
  }

  private check(): void {
    const now = Date.now();
    const stuck = [...this.running].filter(([, at]) => now - at >= this.limitMs).map(([id]) => id);
    if (stuck.length === 0) return;
    const pids = childWorkerd();
    for (const pid of pids) stop(pid);
    this.stops++;
    for (const id of stuck) this.running.delete(id);
    const files = stuck.map((id) => relative(this.root, id)).join(", ");
    process.stderr.write(
      `\n[hung-file-watchdog] ${files}: no progress in ${this.limitMs / 1000} s (KVGATE_TEST_FILE_LIMIT_S), so its isolate is blocked and no test timeout can end it. ` +
        `Stopped the Workers pool's workerd (${pids.length > 0 ? `pid ${pids.join(", ")}` : "none found"}); the file fails, and so does any Workers file running beside it.\n`,
    );
  }
}

/** Whether the file has come to an end: passed, failed or skipped. */
function ended(m: TestModule): boolean {
  const state = m.state();
  return state === "passed" || state === "failed" || state === "skipped";
}

function stop(pid: number): void {
  try {
    process.kill(pid, "SIGKILL");
  } catch {
    // Gone already.
  }
}
