import { describe, expect, it } from "vitest";
import { parseConfig, type ResolvedGroup } from "../../src/config/load.ts";
import { fnv1a64 } from "../../src/fnv64.ts";

function group(input: Record<string, unknown>): ResolvedGroup {
  const r = parseConfig({ modelGroups: [input] });
  if (!r.ok) throw new Error(r.error);
  return r.config.groups[0] as ResolvedGroup;
}

const a = { id: "a", baseUrl: "http://10.0.0.1:8000", model: "m" };
const b = { id: "b", baseUrl: "http://10.0.0.2:8000", model: "m" };

describe("a group's config version", () => {
  it("is the same for the same resolved group, however the config was written", () => {
    const one = group({ name: "g", deployments: [a, b] });
    // Keys in another order, defaults spelled out, a trailing slash the resolver drops.
    const two = group({ deployments: [{ model: "m", baseUrl: "http://10.0.0.1:8000/", id: "a" }, b], strategy: "prefix-aware", name: "g" });
    expect(two.version).toBe(one.version);
    expect(one.version).toMatch(/^[0-9a-f]{16}$/);
  });

  it("changes with any deployment or setting", () => {
    const base = group({ name: "g", deployments: [a, b] }).version;
    const others = [
      group({ name: "g", deployments: [b, a] }),
      group({ name: "g", deployments: [a] }),
      group({ name: "g", deployments: [a, { ...b, baseUrl: "http://10.0.0.3:8000" }] }),
      group({ name: "g", deployments: [a, { ...b, maxInFlight: 8 }] }),
      group({ name: "g", saturation: 8, deployments: [a, b] }),
    ].map((g) => g.version);
    expect(new Set([base, ...others]).size).toBe(others.length + 1);
  });
});

describe("fnv1a64", () => {
  it("matches the reference vectors", () => {
    expect(fnv1a64("")).toBe("cbf29ce484222325");
    expect(fnv1a64("a")).toBe("af63dc4c8601ec8c");
    expect(fnv1a64("foobar")).toBe("85944171f73967e8");
  });
});
