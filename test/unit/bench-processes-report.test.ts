import { describe, expect, it } from "vitest";
import { renderProcesses, summarise, type ProcessRun } from "../../bench/processes/report.ts";

const run = (target: string, process: number, long: number, short: number): ProcessRun => ({ target, process, cpu_us_per_request: long, short_cpu_us_per_request: short, long_over_short: long / short, ttfb_ms_p50: 2 });

describe("bench:processes' summary", () => {
  it("judges a process by its long prompt's cost over its short one's: slow past 1.5 × the run's lowest ratio, whichever target had it", () => {
    const runs = [run("kvgate", 1, 1500, 1000), run("kvgate@old", 1, 3100, 1000), run("kvgate", 2, 2000, 1250), run("kvgate@old", 2, 1400, 1000), run("kvgate", 3, 2200, 1000), run("kvgate@old", 3, 2000, 1000)];
    const [now, old] = summarise(runs, ["kvgate", "kvgate@old"]);
    // The lowest ratio is 1.4 (kvgate@old's second): over 2.1 is slow. 2,200 / 1,000 is; 2,000 / 1,250 (a slower machine that round) is not.
    expect(now).toMatchObject({ target: "kvgate", processes: 3, cpu_us_per_request: { median: 2000, min: 1500, max: 2200 }, long_over_short: { median: 1.6, min: 1.5, max: 2.2 }, slow: 1 });
    expect(old).toMatchObject({ target: "kvgate@old", processes: 3, cpu_us_per_request: { median: 2000, min: 1400, max: 3100 }, slow: 1 });
  });

  it("lists every process of each target in the report", () => {
    const runs = [run("kvgate", 1, 1500, 1000), run("kvgate", 2, 3200, 1000)];
    const md = renderProcesses({ generated_at: "t", commit: "c", command: "npm run bench:processes", machine: { cpu: "x", cores: 2, memoryGiB: 24, node: "v22" }, processes: 2, requests: 800, prompt_kb: 21, short_prompt_kb: 1, targets: summarise(runs, ["kvgate"]), runs });
    expect(md).toContain("| kvgate | 2 | 1500 (1500–3200) | 1000 (1000–1000) | 1.5 (1.5–3.2) | 1 |");
    expect(md).toContain("- kvgate: 1500 / 1000 (× 1.5), 3200 / 1000 (× 3.2)");
  });
});
