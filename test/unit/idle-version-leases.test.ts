import { describe, expect, it } from "vitest";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { GroupRouter } from "../../src/routing/group-router.ts";
import { renewEveryMs } from "../../src/routing/lease-book.ts";

/**
 * An object lets go of a config version no call used lately (never the newest). Its Workers renew
 * the leases they hold under it every leaseTtlMs / 3, each renewal a use: a version whose TTL is
 * long (past three times the idle minute) is used that seldom while its requests run. Let go
 * between two renewals, the group's TTL became the newer version's, shorter, under those leases:
 * the object reclaimed them while their streams went on, gave their slots to other requests past
 * maxInFlight, and answered the next renewal "unheld" (its version unknown).
 */

const LONG_TTL_MS = 300_000;
const SHORT_TTL_MS = 30_000;

function version(leaseTtlMs: number): ResolvedGroup {
  const r = parseConfig({ modelGroups: [{ name: "g", strategy: "round-robin", leaseTtlMs, deployments: [{ id: "a1", baseUrl: "http://127.0.0.1:9001", model: "m", maxInFlight: 1 }] }] });
  if (!r.ok) throw new Error(r.error);
  return r.config.groups[0] as ResolvedGroup;
}

describe("an old version with a longer leaseTtlMs, its leases still held", () => {
  const long = version(LONG_TTL_MS);
  const short = version(SHORT_TTL_MS);

  /** A request on the long version holds the backend's one slot from 0; the operator lowered the TTL at 1. */
  function held(): { r: GroupRouter; lease: string } {
    const r = new GroupRouter("g");
    r.install(long, 0);
    const d = r.route(long.version, [], [], 0);
    if ("refused" in d) throw new Error(`refused: ${d.refused}`);
    r.install(short, 1);
    return { r, lease: d.lease };
  }

  it("is kept between its Workers' renewals: the slot stays taken, past the idle minute and the new TTL", () => {
    const { r, lease } = held();
    // A request of the new version, after the idle minute: the slot is taken.
    expect(r.route(short.version, [], [], 70_000)).toEqual({ refused: "at-capacity", rev: 0 });
    // The object's alarm, when the new TTL from then would have passed; the Worker's renewal, due.
    const renewAt = renewEveryMs(LONG_TTL_MS);
    const reclaimed = r.expire(70_000 + SHORT_TTL_MS);
    const renewal = r.renew({ lease, version: long.version, backendId: "a1" }, renewAt);
    const next = r.route(short.version, [], [], renewAt + 1);
    expect({ reclaimed, renewal, next }).toEqual({ reclaimed: 0, renewal: "held", next: { refused: "at-capacity", rev: 0 } });
    expect(r.versions()).toEqual([short.version, long.version]);
  });

  it("is let go once its own leaseTtlMs passed with no call: its leases have expired by then", () => {
    const { r } = held();
    const d = r.route(short.version, [], [], LONG_TTL_MS);
    expect(d).toMatchObject({ backendId: "a1" });
    expect(r.versions()).toEqual([short.version]);
  });
});
