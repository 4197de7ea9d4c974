import { describe, expect, it } from "vitest";
import type { FleetStatus } from "../../src/fleet/admin-api.ts";
import type { AdminClient } from "../../cli/admin-client.ts";
import { FLEET_COMMANDS } from "../../cli/commands.ts";

/** `npx kvgate status`'s text for the admin API's answer `status`. */
async function statusText(status: FleetStatus): Promise<string> {
  const api: AdminClient = { url: "https://gw.example", call: async <T>() => status as T };
  const out: string[] = [];
  await FLEET_COMMANDS.status?.(api, {}, { out: (t) => out.push(t), note: () => undefined, sleep: async () => undefined }, []);
  return out.join("\n");
}

const groups: FleetStatus["groups"] = [{ name: "a", rev: 3, routingRev: 3, deployments: 1, takingRequests: 1, inFlight: 0, deploymentRows: [] }];

describe("npx kvgate status", () => {
  it("says under its first line what the last deploy's modelGroups did not do", async () => {
    const refused = await statusText({ rev: 3, groups, seed: { state: "refused", message: 'modelGroups[1].name "b" is already the name or alias of another group', param: "modelGroups[1].name" } });
    expect(refused.split("\n").slice(0, 2)).toEqual([
      "https://gw.example: fleet revision 3, 1 group(s)",
      'warning: the last deploy\'s modelGroups were refused, the fleet kept as it was: modelGroups[1].name "b" is already the name or alias of another group',
    ]);
    const held = await statusText({ rev: 3, groups, seed: { state: "taken", rev: 3, aliasesHeld: [{ group: "a", alias: "chat", holder: "ops" }] } });
    expect(held.split("\n")[1]).toBe("warning: the last deploy's group a went without alias chat, which group ops holds");
  });

  it("says nothing of a deploy whose modelGroups were taken whole, or of none", async () => {
    for (const seed of [{ state: "taken" as const, rev: 3, aliasesHeld: [] }, null]) expect((await statusText({ rev: 3, groups, seed })).split("\n")[1]).toMatch(/^GROUP\s+DEPLOYMENTS/);
  });
});

describe("npx kvgate status's IN-FLIGHT", () => {
  it("is - for a group whose in flight is unknown (a routing object that did not answer), not 0", async () => {
    const unknown: FleetStatus["groups"] = [{ name: "down", rev: 4, routingRev: null, deployments: 2, takingRequests: 2, inFlight: null, deploymentRows: [] }, ...groups];
    const rows = (await statusText({ rev: 4, groups: unknown, seed: null })).split("\n").slice(2).map((l) => l.trim().split(/\s+/));
    expect(rows).toEqual([
      ["down", "2", "2", "-", "4", "unreachable"],
      ["a", "1", "1", "0", "3", "current"],
    ]);
  });
});
