import { resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { parseArgs as parseChaosArgs, DEFAULT_OUT } from "../../bench/chaos/args.ts";
import { parseCeilingArgs } from "../../bench/ceiling/args.ts";
import { HelpRequested, intBetween, numberFlag, parseFlags, positiveInt, positiveNumber, UsageError } from "../../bench/harness/argv.ts";
import { parseArgs as parseOverheadArgs } from "../../bench/overhead/args.ts";
import { parseFeedbackArgs } from "../../bench/routing/feedback-args.ts";
import { parseReplicasArgs } from "../../bench/routing/replicas-args.ts";
import { parseVirtualArgs } from "../../bench/virtual/args.ts";
import { TARGET_NAMES } from "../../bench/overhead/targets.ts";

const FLAGS = {
  repeats: { type: "string", default: "3" },
  baseline: { type: "string", multiple: true, default: [] as string[] },
  "no-write": { type: "boolean", default: false },
  help: { type: "boolean", short: "h" },
} as const;

const parse = (argv: string[]) => parseFlags(argv, FLAGS, "--repeats N --baseline DIR --no-write");

describe("a benchmark's command line (parseFlags)", () => {
  it("takes --flag value and --flag=value, switches, repeated flags and defaults", () => {
    expect(parse([])).toEqual({ repeats: "3", baseline: [], "no-write": false });
    expect(parse(["--repeats", "5", "--no-write", "--baseline", "a", "--baseline=b"])).toEqual({ repeats: "5", baseline: ["a", "b"], "no-write": true });
    expect(parse(["--repeats=7", "--repeats", "8"]).repeats).toBe("8");
    expect(parse(["-h"]).help).toBe(true);
  });

  it("hands a value that starts with a dash to the flag, for its own check to judge", () => {
    expect(parse(["--repeats", "-1"]).repeats).toBe("-1");
    expect(() => positiveInt("--repeats", parse(["--repeats", "-1"]).repeats)).toThrow('--repeats takes a positive integer, not "-1"');
  });

  it("refuses, in one line naming it, an unknown flag, a stray word, a missing value and a value given to a switch", () => {
    const refusal = (argv: string[]): string => {
      try {
        parse(argv);
      } catch (e) {
        return (e as Error).message;
      }
      throw new Error("accepted");
    };
    expect(refusal(["--repeat", "5"])).toBe("unknown argument --repeat (--repeats N --baseline DIR --no-write)");
    expect(refusal(["5"])).toBe("unknown argument 5 (--repeats N --baseline DIR --no-write)");
    expect(refusal(["--no-write", "--", "x"])).toMatch(/^unknown argument -- /);
    expect(refusal(["-x"])).toMatch(/^unknown argument -x /);
    expect(refusal(["--repeats"])).toBe("--repeats needs a value");
    expect(refusal(["--no-write=yes"])).toBe("--no-write takes no value");
    expect(refusal(["--constructor", "1"])).toMatch(/^unknown argument --constructor/);
    expect(() => parseFlags(["--x"], {}, "")).toThrow(/^unknown argument --x$/);
  });

  it("makes every refusal a UsageError, and --help or -h a HelpRequested with the usage unless the command takes --help itself", () => {
    const thrown = (f: () => unknown): unknown => {
      try {
        f();
      } catch (e) {
        return e;
      }
      throw new Error("accepted");
    };
    for (const argv of [["--repeat", "5"], ["5"], ["--repeats"], ["--no-write=yes"]]) expect(thrown(() => parse(argv))).toBeInstanceOf(UsageError);
    expect(thrown(() => positiveInt("--repeats", "0"))).toBeInstanceOf(UsageError);
    const options = { repeats: { type: "string" } } as const;
    for (const argv of [["--help"], ["-h"], ["--bogus", "--help"], ["--repeats", "5", "-h"]]) {
      const help = thrown(() => parseFlags(argv, options, "--repeats N"));
      expect(help).toBeInstanceOf(HelpRequested);
      expect(help).toHaveProperty("usage", "--repeats N");
    }
    expect(parse(["--help"]).help).toBe(true);
  });

  it("reads values with one wording for every benchmark", () => {
    expect(numberFlag("--load", "0.8")).toBe(0.8);
    expect(numberFlag("--load", "-2")).toBe(-2);
    expect(() => numberFlag("--load", "")).toThrow('--load takes a number, not ""');
    expect(() => numberFlag("--load", "x")).toThrow('--load takes a number, not "x"');
    expect(positiveNumber("--seconds", "1.5")).toBe(1.5);
    for (const bad of ["0", "-1", "Infinity", "", "abc"]) expect(() => positiveNumber("--seconds", bad)).toThrow(`--seconds takes a positive number, not "${bad}"`);
    expect(positiveInt("--repeats", "4")).toBe(4);
    for (const bad of ["0", "1.5", "", "x"]) expect(() => positiveInt("--repeats", bad)).toThrow(`--repeats takes a positive integer, not "${bad}"`);
    expect(intBetween("--seconds", "3", 3, 600)).toBe(3);
    expect(() => intBetween("--seconds", "601", 3, 600)).toThrow('--seconds takes an integer from 3 to 600, not "601"');
  });
});

describe("npm run bench:overhead's flags", () => {
  it("default to three repeats of 5 s over every target, writing the results", () => {
    expect(parseOverheadArgs([])).toEqual({ quick: false, repeats: 3, seconds: 5, warmSeconds: 3, targets: [...TARGET_NAMES], scenarios: [], write: true, baseline: null });
  });

  it("--quick shortens what no flag sets; a flag still wins", () => {
    expect(parseOverheadArgs(["--quick"])).toMatchObject({ quick: true, repeats: 1, seconds: 1.5, warmSeconds: 1 });
    expect(parseOverheadArgs(["--seconds", "2", "--quick"])).toMatchObject({ repeats: 1, seconds: 2 });
  });

  it("takes targets, scenarios, a baseline and --no-write", () => {
    const args = parseOverheadArgs(["--targets", "floor,kvgate", "--scenarios=nonstream/c50,stream/c1/100ch", "--baseline", "../old", "--no-write"]);
    expect(args).toMatchObject({ targets: ["floor", "kvgate"], scenarios: ["nonstream/c50", "stream/c1/100ch"], baseline: resolve("../old"), write: false });
  });

  it("refuses an unknown target or flag and a bad count", () => {
    expect(() => parseOverheadArgs(["--targets", "floor,nginx"])).toThrow(/unknown target "nginx"/);
    expect(() => parseOverheadArgs(["--repeat", "2"])).toThrow(/^unknown argument --repeat \(--quick --repeats N/);
    expect(() => parseOverheadArgs(["--repeats", "1.5"])).toThrow('--repeats takes a positive integer, not "1.5"');
    expect(() => parseOverheadArgs(["--seconds", "0"])).toThrow('--seconds takes a positive number, not "0"');
    expect(() => parseOverheadArgs(["--baseline"])).toThrow("--baseline needs a value");
  });
});

describe("npm run bench:ceiling's flags", () => {
  it("default to six repeats of 3 s, non-streamed, writing the results", () => {
    expect(parseCeilingArgs([])).toEqual({ repeats: 6, seconds: 3, write: true, baselines: [], stream: [], clientUsage: false, targets: [], together: false });
  });

  it("take several baselines and stream lengths, the lengths once each and in order", () => {
    const args = parseCeilingArgs(["--stream", "100", "--stream", "1", "--stream=100", "--baseline", "a", "--baseline", "b", "--client-usage", "--no-write", "--seconds", "0.5"]);
    expect(args).toEqual({ repeats: 6, seconds: 0.5, write: false, baselines: [resolve("a"), resolve("b")], stream: [1, 100], clientUsage: true, targets: [], together: false });
  });

  it("take a list of targets for a probe, only with --no-write", () => {
    expect(parseCeilingArgs(["--target", "kvgate,floor+body+route", "--no-write"]).targets).toEqual(["kvgate", "floor+body+route"]);
    expect(() => parseCeilingArgs(["--target", "kvgate"])).toThrow("--target is for probes: add --no-write");
    expect(() => parseCeilingArgs(["--target", ",", "--no-write"])).toThrow("--target takes one or more target names");
    expect(parseCeilingArgs(["--together", "--no-write"]).together).toBe(true);
    expect(() => parseCeilingArgs(["--together"])).toThrow("--together is for probes: add --no-write");
  });

  it("refuse --client-usage without --stream, bad numbers and unknown flags", () => {
    expect(() => parseCeilingArgs(["--client-usage"])).toThrow("--client-usage applies to streamed runs: add --stream N");
    expect(() => parseCeilingArgs(["--stream", "1.5"])).toThrow('--stream takes a positive integer, not "1.5"');
    expect(() => parseCeilingArgs(["--repeats", "0"])).toThrow('--repeats takes a positive integer, not "0"');
    expect(() => parseCeilingArgs(["--seconds", "Infinity"])).toThrow('--seconds takes a positive number, not "Infinity"');
    expect(() => parseCeilingArgs(["--streams", "1"])).toThrow("unknown argument --streams (--repeats N --seconds S --baseline DIR --stream N --client-usage --target T,... --together --no-write)");
  });
});

describe("npm run bench:chaos's flags", () => {
  it("default to 1000 connections for 60 s, 8 tokens, into bench/results", () => {
    expect(parseChaosArgs([])).toEqual({ quick: false, connections: 1000, seconds: 60, maxTokens: 8, out: DEFAULT_OUT });
  });

  it("--quick is 200 connections for 15 s unless a flag says otherwise", () => {
    expect(parseChaosArgs(["--quick"])).toEqual({ quick: true, connections: 200, seconds: 15, maxTokens: 8, out: DEFAULT_OUT });
    expect(parseChaosArgs(["--connections", "50", "--quick", "--out", "tmp"])).toEqual({ quick: true, connections: 50, seconds: 15, maxTokens: 8, out: resolve("tmp") });
  });

  it("keeps the load bounded in count and time", () => {
    expect(() => parseChaosArgs(["--connections", "5001"])).toThrow('--connections takes an integer from 1 to 5000, not "5001"');
    expect(() => parseChaosArgs(["--seconds", "2"])).toThrow('--seconds takes an integer from 3 to 600, not "2"');
    expect(() => parseChaosArgs(["--max-tokens", "0"])).toThrow('--max-tokens takes an integer from 1 to 1024, not "0"');
    expect(() => parseChaosArgs(["--quick=1"])).toThrow("--quick takes no value");
    expect(() => parseChaosArgs(["--conections", "5"])).toThrow(/^unknown argument --conections \(--quick, --connections N/);
  });
});

describe("npm run bench:routing-feedback's flags", () => {
  it("run on the fleet into the results folder; --virtual runs 16 draws a seed beside them, never over them", () => {
    expect(parseFeedbackArgs([], "/r")).toMatchObject({ out: "/r", virtual: false, seeds: 3, sessions: [24, 32], turns: undefined });
    expect(parseFeedbackArgs(["--virtual"], "/r")).toMatchObject({ out: "/r/virtual-feedback", virtual: true, draws: 16 });
    expect(parseFeedbackArgs(["--virtual", "--draws", "4", "--out", "tmp"], "/r")).toMatchObject({ out: resolve("tmp"), draws: 4 });
  });

  it("refuse --draws on the fleet and --turns in virtual time", () => {
    expect(() => parseFeedbackArgs(["--draws", "4"], "/r")).toThrow("--draws: only with --virtual");
    expect(() => parseFeedbackArgs(["--virtual", "--turns", "4"], "/r")).toThrow("--turns: not with --virtual");
  });
});

describe("npm run bench:routing-replicas's flags", () => {
  it("default to 1, 2, 4 and 8 instances at 8, 16 and 24 sessions, 3 seeds; --quick to the smallest comparison", () => {
    expect(parseReplicasArgs([], "/r")).toEqual({ out: "/r", quick: false, reportOnly: false, seeds: 3, instances: [1, 2, 4, 8], sessions: [8, 16, 24], routers: ["prefix-aware", "sglang-cache_aware"], turns: undefined });
    expect(parseReplicasArgs(["--quick", "--instances=2,4"], "/r")).toMatchObject({ quick: true, seeds: 1, instances: [2, 4], sessions: [8], turns: 4 });
  });

  it("refuse an unknown flag and a count that is not a positive integer, in the benchmarks' one wording", () => {
    expect(() => parseReplicasArgs(["--instance", "2"], "/r")).toThrow(/^unknown argument --instance \(--quick --report-only --seeds N/);
    expect(() => parseReplicasArgs(["--instances", "2,0"], "/r")).toThrow('--instances takes a positive integer, not "0"');
    expect(() => parseReplicasArgs(["--turns"], "/r")).toThrow("--turns needs a value");
  });
});

describe("npm run bench:routing-virtual's flags", () => {
  it("default to Mooncake through kvgate's three strategies and 2 and 4 shards, 16 draws a seed, each trace's own seeds and hop", () => {
    const a = parseVirtualArgs([], "/r");
    expect(a).toMatchObject({ traces: ["mooncake"], seeds: undefined, jitterSeeds: 16, hopMs: undefined, preRouteHopMs: undefined, sessions: undefined, strategies: ["prefix-aware", "least-loaded", "round-robin"], shards: [2, 4], quick: false, out: "/r", reportOnly: false, chainOnly: false, policies: ["fcfs"] });
    expect(a.regimes.map((r) => r.name)).toEqual(["roomy", "pressured"]);
  });

  it("take closed-loop traces at picked points, the hops, one object only, and --quick's two draws", () => {
    const a = parseVirtualArgs(["--trace", "rag,b2b-saas", "--regime", "pressured", "--sessions", "8,16", "--hop-ms", "0", "--pre-route-hop-ms", "7.5", "--shards", "1", "--quick", "--out", "tmp", "--scheduling-policy", "fcfs,priority"], "/r");
    expect(a).toMatchObject({ traces: ["rag", "b2b-saas"], sessions: [8, 16], hopMs: 0, preRouteHopMs: 7.5, shards: [], jitterSeeds: 2, out: resolve("tmp"), policies: ["fcfs", "priority"] });
    expect(a.regimes.map((r) => r.name)).toEqual(["pressured"]);
  });

  it("refuse, in one line naming it, an unknown flag or name, a bad count and a negative hop", () => {
    expect(() => parseVirtualArgs(["--hepl"], "/r")).toThrow(/^unknown argument --hepl \(--trace T,\.\.\. --seeds N/);
    expect(() => parseVirtualArgs(["--trace", "chat"], "/r")).toThrow('--trace: "chat" is not one of mooncake, b2b-saas,');
    expect(() => parseVirtualArgs(["--strategy", "fastest"], "/r")).toThrow('--strategy: "fastest" is not one of');
    expect(() => parseVirtualArgs(["--regime", "open-loop"], "/r")).toThrow(/--regime: "open-loop" is not one of roomy, pressured \(an open-loop trace is run with --trace mooncake or b2b-saas\)/);
    expect(() => parseVirtualArgs(["--jitter-seeds", "0"], "/r")).toThrow('--jitter-seeds takes a positive integer, not "0"');
    expect(() => parseVirtualArgs(["--hop-ms", "-1"], "/r")).toThrow('--hop-ms takes a number of at least 0, not "-1"');
    expect(() => parseVirtualArgs(["--hop-ms", "x"], "/r")).toThrow('--hop-ms takes a number, not "x"');
    expect(() => parseVirtualArgs(["--pre-route-hop-ms", "-2"], "/r")).toThrow('--pre-route-hop-ms takes a number of at least 0, not "-2"');
    expect(() => parseVirtualArgs(["--ms-per-mb", "-2"], "/r")).toThrow('--ms-per-mb takes a number of at least 0, not "-2"');
    expect(() => parseVirtualArgs(["--scheduling-policy", "lifo"], "/r")).toThrow('--scheduling-policy: "lifo" is not one of');
  });
});
