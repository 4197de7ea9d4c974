import { describe, expect, it } from "vitest";
import { statCpuMs } from "../../bench/harness/process-cpu.ts";

describe("bench:ceiling reads a process's CPU time from /proc/<pid>/stat", () => {
  it("adds utime and stime (fields 14 and 15) and turns clock ticks into ms", () => {
    const line = "4242 (workerd) S 1 4242 4242 0 -1 4194560 5000 0 0 0 1234 56 0 0 20 0 9 0 100 1000000 5000 18446744073709551615";
    expect(statCpuMs(line)).toBe((1234 + 56) * 10);
  });

  it("counts fields after the last parenthesis, whatever the command name holds", () => {
    const line = "7 (we(ird) name) R 1 7 7 0 -1 0 0 0 0 0 300 200 0 0 20 0 1 0 5 100 10 0";
    expect(statCpuMs(line)).toBe(5000);
  });

  it("refuses a line it cannot read instead of reporting zero", () => {
    expect(() => statCpuMs("garbage")).toThrow(/unreadable/);
  });
});
