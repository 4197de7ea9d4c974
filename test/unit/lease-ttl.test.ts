import { describe, expect, it } from "vitest";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { GroupRouter } from "../../src/routing/group-router.ts";
import { FLUSH_RETRY_FIRST_MS, MIN_LEASE_TTL_MS, renewEveryMs } from "../../src/routing/lease-book.ts";

/**
 * leaseTtlMs has a floor: a Worker renews a lease it holds every leaseTtlMs / 3, and a renewal
 * whose call failed (the routing object busy for a moment) is sent again FLUSH_RETRY_FIRST_MS
 * later. Below the floor that try again lands after the lease expired: the object frees the slot
 * under the running request and gives it to another, past the backend's maxInFlight.
 */

const deployment = { id: "a1", baseUrl: "http://127.0.0.1:9001", model: "m", maxInFlight: 1 };
const groupWith = (over: Record<string, unknown>) => ({ modelGroups: [{ name: "g", strategy: "round-robin", deployments: [deployment], ...over }] });

function resolved(leaseTtlMs: number): ResolvedGroup {
  const r = parseConfig(groupWith({ leaseTtlMs: MIN_LEASE_TTL_MS }));
  if (!r.ok) throw new Error(r.error);
  // A TTL below the floor, as a config took it before there was one.
  return { ...(r.config.groups[0] as ResolvedGroup), leaseTtlMs };
}

/**
 * A request holds the backend's one slot; its Worker's first renewal, one interval in, fails, and
 * is sent again FLUSH_RETRY_FIRST_MS later, landing `tripMs` after that. Another request comes at
 * the lease's TTL: whether it was given the slot the first one still holds.
 */
function doubleBooked(leaseTtlMs: number, tripMs: number): boolean {
  const g = resolved(leaseTtlMs);
  const router = new GroupRouter("g");
  router.install(g, 0);
  const first = router.route(g.version, [], [], 0);
  if ("refused" in first) throw new Error(`refused: ${first.refused}`);
  const retryLands = renewEveryMs(leaseTtlMs) + FLUSH_RETRY_FIRST_MS + tripMs;
  if (retryLands < leaseTtlMs) router.renew({ lease: first.lease, version: g.version, backendId: "a1" }, retryLands);
  const second = router.route(g.version, [], [], leaseTtlMs);
  if (retryLands >= leaseTtlMs) router.renew({ lease: first.lease, version: g.version, backendId: "a1" }, retryLands);
  return !("refused" in second);
}

describe("leaseTtlMs below the floor", () => {
  it("would let one failed renewal free a live request's slot for another (the reason for the floor)", () => {
    expect(doubleBooked(MIN_LEASE_TTL_MS / 2, 1)).toBe(true);
    // At the floor, the try again has a whole interval to land.
    expect(doubleBooked(MIN_LEASE_TTL_MS, renewEveryMs(MIN_LEASE_TTL_MS) - 1)).toBe(false);
  });

  it("is refused by the config, naming the field and the floor", () => {
    for (const leaseTtlMs of [1, 30, MIN_LEASE_TTL_MS - 1]) {
      const r = parseConfig(groupWith({ leaseTtlMs }));
      expect(r.ok, `leaseTtlMs ${leaseTtlMs}`).toBe(false);
      if (!r.ok) expect(r.errors).toEqual([`modelGroups[0].leaseTtlMs must be >= ${MIN_LEASE_TTL_MS}: leases are renewed every leaseTtlMs / 3, which must be at least the ${FLUSH_RETRY_FIRST_MS} ms a renewal that failed waits to be sent again, or a running request loses its slot`]);
    }
    expect(parseConfig(groupWith({ leaseTtlMs: MIN_LEASE_TTL_MS })).ok).toBe(true);
    // The README's figure.
    expect(MIN_LEASE_TTL_MS).toBe(300);
  });
});
