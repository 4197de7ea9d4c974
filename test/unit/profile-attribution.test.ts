import { SourceMap } from "node:module";
import { describe, expect, it } from "vitest";
import { areaOf, summarise, type CpuProfile } from "../../bench/profile/attribute.ts";

/**
 * A one-line bundle `function a(){}function b(){}`: `a` (col 0) is `first` of src/x/one.ts line 5,
 * `b` (col 14) is `second` of a library's file, line 10. Mappings in source-map VLQ:
 * [0,0,4,0,0] and [+14,+1,+5,0,+1].
 */
const MAP = new SourceMap({
  version: 3,
  file: "index.js",
  sourceRoot: "",
  sourcesContent: [],
  sources: ["../src/x/one.ts", "../node_modules/lib/dist/y.js"],
  names: ["first", "second"],
  mappings: "AAIAA,cCKAC",
});

const frame = (functionName: string, url: string, lineNumber = -1, columnNumber = -1) => ({ functionName, url, lineNumber, columnNumber });

/** root → first → second → first (recursion), and the runtime's frames beside. */
const PROFILE: CpuProfile = {
  startTime: 0,
  endTime: 1_200,
  nodes: [
    { id: 1, callFrame: frame("(root)", ""), children: [2, 4, 5, 6] },
    { id: 2, callFrame: frame("a", "index.js", 0, 0), children: [3] },
    { id: 3, callFrame: frame("b", "index.js", 0, 14), children: [7] },
    { id: 4, callFrame: frame("(idle)", "") },
    { id: 5, callFrame: frame("(garbage collector)", "") },
    { id: 6, callFrame: frame("setTimeout", "node-internal:internal_timers", 3, 1) },
    { id: 7, callFrame: frame("a", "index.js", 0, 0) },
  ],
  samples: [3, 3, 3, 2, 4, 4, 4, 4, 5, 5, 6, 7],
  timeDeltas: Array.from({ length: 12 }, () => 100),
};

describe("bench:profile's attribution", () => {
  const s = summarise(PROFILE, { url: "index.js", map: MAP }, "/work/main");

  it("counts idle time apart and shares the busy time", () => {
    expect(s.samples).toBe(12);
    expect(s.idle_share).toBeCloseTo(4 / 12, 4);
    expect(s.busy_ms).toBeCloseTo(0.8, 6);
    const sum = s.areas.reduce((t, a) => t + a.self_share, 0);
    expect(sum).toBeCloseTo(1, 4);
  });

  it("names bundled frames by their source through the map, and puts them in their area", () => {
    const byFrame = new Map(s.functions.map((f) => [f.frame, f]));
    expect(byFrame.get("first src/x/one.ts:5")).toMatchObject({ area: "src/x", self_share: 0.25 });
    expect(byFrame.get("second node_modules/lib/dist/y.js:10")).toMatchObject({ area: "lib", self_share: 0.375 });
    expect(byFrame.get("(garbage collector)")).toMatchObject({ area: "runtime: garbage collector", self_share: 0.25 });
    expect(byFrame.get("setTimeout [node-internal:internal_timers]")).toMatchObject({ area: "runtime: node-internal:internal_timers", self_share: 0.125 });
    expect([...byFrame.keys()].some((f) => f.startsWith("(idle)"))).toBe(false);
  });

  it("counts a function once per sample however deep it recurses, and leaves the runtime out of the stages", () => {
    // first is on the stack of 5 busy samples (one of them twice), second of 4.
    expect(s.stages.map((f) => [f.frame, f.total_share])).toEqual([
      ["first src/x/one.ts:5", 0.625],
      ["second node_modules/lib/dist/y.js:10", 0.5],
    ]);
  });

  it("weighs a sample by the time to the next one, as the sampler stretches on a busy thread", () => {
    // The sample before the idle ones (node 2) took 500 µs, not 100.
    const stretched = { ...PROFILE, timeDeltas: PROFILE.timeDeltas.map((d, i) => (i === 4 ? 500 : d)) };
    const w = summarise(stretched, { url: "index.js", map: MAP }, "/work/main");
    expect(w.busy_ms).toBeCloseTo(1.2, 6);
    const first = w.functions.find((f) => f.frame === "first src/x/one.ts:5");
    expect(first?.self_share).toBeCloseTo(0.6 / 1.2, 4);
  });

  it("names areas by package or by two folders of kvgate's", () => {
    expect(areaOf("node_modules/@scope/pkg/dist/a.js")).toBe("@scope/pkg");
    expect(areaOf("node_modules/hono/dist/compose.js")).toBe("hono");
    expect(areaOf("workers/gateway/attempt.ts")).toBe("workers/gateway");
    expect(areaOf("durable-objects/model-group.ts")).toBe("durable-objects");
    expect(areaOf(null)).toBe("bundler helpers (no source)");
  });
});
