import { describe, expect, it } from "vitest";
import { renderProcesses, summarise, type ProcessRun } from "../../bench/processes/report.ts";

const run = (target: string, process: number, cpu: number): ProcessRun => ({ target, process, cpu_us_per_request: cpu, ttfb_ms_p50: 2 });

describe("bench:processes' summary", () => {
  it("counts a process slow past 1.5 × the run's lowest, whichever target had it", () => {
    const runs = [run("kvgate", 1, 1500), run("kvgate@old", 1, 3100), run("kvgate", 2, 1600), run("kvgate@old", 2, 1400), run("kvgate", 3, 2150), run("kvgate@old", 3, 2050)];
    const [now, old] = summarise(runs, ["kvgate", "kvgate@old"]);
    // The floor is 1,400 (kvgate@old's second): 2,150 is over 2,100, 2,050 is not.
    expect(now).toEqual({ target: "kvgate", processes: 3, cpu_us_per_request: { median: 1600, min: 1500, max: 2150 }, slow: 1 });
    expect(old).toEqual({ target: "kvgate@old", processes: 3, cpu_us_per_request: { median: 2050, min: 1400, max: 3100 }, slow: 1 });
  });

  it("lists every process of each target in the report", () => {
    const runs = [run("kvgate", 1, 1500), run("kvgate", 2, 3200)];
    const md = renderProcesses({ generated_at: "t", commit: "c", command: "npm run bench:processes", machine: { cpu: "x", cores: 2, memoryGiB: 24, node: "v22" }, processes: 2, requests: 400, prompt_kb: 21, targets: summarise(runs, ["kvgate"]), runs });
    expect(md).toContain("| kvgate | 2 | 1500 | 1500–3200 | 1 |");
    expect(md).toContain("- kvgate: 1500, 3200");
    expect(md).toContain("over the last 200");
  });
});
