import { describe, expect, it } from "vitest";
import { fleetHelp, flagName, parseFleetArgs } from "../../bench/fleet/cli-args.ts";
import { OPTION_SPECS, faultsFor, profileOf, resolveFleetOptions } from "../../bench/fleet/options.ts";
import { PRESETS } from "../../bench/fleet/presets.ts";

describe("fleet options", () => {
  it("defaults to 4 a100-7b workers from port 9001 serving kvgate-sim", () => {
    const o = resolveFleetOptions();
    expect(o).toMatchObject({ workers: 4, basePort: 9001, servedModelName: "kvgate-sim", preset: "a100-7b", defaultMaxTokens: 16 });
    expect(o.kvCapacityBlocks).toBe(PRESETS["a100-7b"].kvCapacityBlocks);
  });

  it("takes the profile from the preset and lets any parameter override it", () => {
    const o = resolveFleetOptions({ preset: "l4-7b", decodeStepMs: 5, kvCapacityBlocks: undefined });
    expect(o.decodeStepMs).toBe(5);
    expect(o.kvCapacityBlocks).toBe(PRESETS["l4-7b"].kvCapacityBlocks);
    expect(o.prefillMsPerToken).toBe(PRESETS["l4-7b"].prefillMsPerToken);
  });

  it("rejects unknown options and bad values", () => {
    expect(() => resolveFleetOptions({ workers: 0 })).toThrow(/workers/);
    expect(() => resolveFleetOptions({ errorRate: 1.5 })).toThrow(/errorRate/);
    expect(() => resolveFleetOptions({ faultWorker: 4 })).toThrow(/faultWorker/);
    expect(() => resolveFleetOptions({ basePort: 65535, workers: 2 })).toThrow(/basePort/);
    expect(() => resolveFleetOptions(JSON.parse('{"wrokers": 2}') as Record<string, never>)).toThrow(/wrokers/);
  });

  it("applies faults to the chosen worker only", () => {
    const o = resolveFleetOptions({ workers: 3, faultWorker: 1, errorRate: 0.5, slowFactor: 3 });
    expect(faultsFor(o, 1)).toMatchObject({ errorRate: 0.5, slowFactor: 3 });
    expect(faultsFor(o, 0)).toMatchObject({ errorRate: 0, slowFactor: 1 });
    const all = resolveFleetOptions({ errorRate: 0.5 });
    expect([0, 1, 2, 3].map((i) => faultsFor(all, i).errorRate)).toEqual([0.5, 0.5, 0.5, 0.5]);
  });
});

describe("fleet CLI arguments", () => {
  it("maps --kebab-case flags to options, in both --flag value and --flag=value forms", () => {
    const parsed = parseFleetArgs(["--workers", "2", "--base-port=9100", "--preset", "instant", "--served-model-name", "m", "--prefill-ms-per-token", "0.5", "--fault-worker", "all"]);
    expect(parsed).toEqual({
      help: false,
      options: { workers: 2, basePort: 9100, preset: "instant", servedModelName: "m", prefillMsPerToken: 0.5, faultWorker: "all" },
    });
    expect(parseFleetArgs(["--fault-worker", "1"])).toEqual({ help: false, options: { faultWorker: 1 } });
  });

  it("rejects unknown flags, missing values and bad presets", () => {
    expect(() => parseFleetArgs(["--wrokers", "2"])).toThrow(/--wrokers/);
    expect(() => parseFleetArgs(["--workers"])).toThrow(/needs a value/);
    expect(() => parseFleetArgs(["--preset", "h100"])).toThrow(/a100-7b/);
    expect(() => parseFleetArgs(["--workers", "two"])).toThrow(/number/);
  });

  it("--help lists every flag with its default", () => {
    expect(parseFleetArgs(["--workers", "2", "--help"])).toEqual({ help: true });
    const help = fleetHelp();
    for (const name of Object.keys(OPTION_SPECS)) expect(help).toContain(flagName(name));
    expect(help).toContain("default: 9001");
    expect(help).toContain(`a100-7b ${PRESETS["a100-7b"].kvCapacityBlocks}`);
  });
});

describe("timeScale", () => {
  it("scales every GPU latency and nothing else", () => {
    const real = profileOf(resolveFleetOptions({ preset: "l4-7b" }));
    const fast = profileOf(resolveFleetOptions({ preset: "l4-7b", timeScale: 0.25 }));
    expect(fast.prefillBaseMs).toBeCloseTo(real.prefillBaseMs / 4);
    expect(fast.prefillMsPerToken).toBeCloseTo(real.prefillMsPerToken / 4);
    expect(fast.decodeStepMs).toBeCloseTo(real.decodeStepMs / 4);
    expect(fast.kvCapacityBlocks).toBe(real.kvCapacityBlocks);
    expect(fast.batchSlowdown).toBe(real.batchSlowdown);
    expect(() => resolveFleetOptions({ timeScale: 0 })).toThrow(/timeScale/);
  });
});
