import { afterEach } from "vitest";
import { startFleet, type Fleet, type StartFleetOptions } from "../../bench/fleet/index.ts";

/**
 * A fleet per test on ephemeral ports, preset "instant" unless the test says otherwise; every
 * fleet a test started is closed after it. Call once at the top of a test file.
 */
export function useFleets(): (options?: StartFleetOptions) => Promise<Fleet> {
  const fleets: Fleet[] = [];
  afterEach(async () => {
    await Promise.all(fleets.splice(0).map((f) => f.close()));
  });
  return async (options = {}) => {
    const fleet = await startFleet({ basePort: 0, preset: "instant", ...options });
    fleets.push(fleet);
    return fleet;
  };
}
