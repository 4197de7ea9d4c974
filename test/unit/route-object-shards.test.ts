import { describe, expect, it } from "vitest";
import { shardRun, type Repeat } from "../../bench/route-object/shards.ts";

const repeat = (routesPerSec: number): Repeat => ({ usPerRoute: 1e6 / routesPerSec, routesPerSec, busiestLoad: 1, workerUs: routesPerSec / 1000, matchedShare: 0.5 });
const point = { backends: 4, chainBlocks: 64, shards: 2 };

describe("bench:route-object's shard runs", () => {
  it("take the median repeat by rate as every median of bench/ does: the lower middle of an even count", () => {
    // Before: reps[n >> 1], the upper middle (3,000 of 1,000 / 2,000 / 3,000 / 4,000).
    const run = shardRun(point, [4000, 1000, 3000, 2000].map(repeat), 100);
    expect(run.routes_per_sec).toBe(2000);
    expect(run.us_per_route).toBe(500);
    expect(run.worker_us_per_route).toBe(2);
    expect([run.routes_per_sec_min, run.routes_per_sec_max]).toEqual([1000, 4000]);
  });

  it("take the middle one of an odd count", () => {
    expect(shardRun(point, [3000, 1000, 2000].map(repeat), 100).routes_per_sec).toBe(2000);
  });
});
