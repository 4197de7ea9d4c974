import { startFleet } from "../fleet/index.ts";
import { replay, summarize } from "../replay/index.ts";
import type { Trace } from "../traces/index.ts";
import { MODEL } from "./matrix.ts";

/**
 * The most any routing could reach: the same trace against one worker with an unbounded cache
 * and no latency, which sees every request. Cold first turns and each turn's new text stay misses.
 */
export async function ceilingOf(trace: Trace): Promise<number | null> {
  const fleet = await startFleet({ workers: 1, basePort: 0, preset: "instant", kvCapacityBlocks: 1 << 22, servedModelName: MODEL });
  try {
    return summarize(await replay(trace, { baseUrl: fleet.urls[0] as string, model: MODEL })).kv_hit;
  } finally {
    await fleet.close();
  }
}
