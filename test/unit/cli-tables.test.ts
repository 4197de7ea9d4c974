import { describe, expect, it } from "vitest";
import type { DeploymentList, DeploymentRow } from "../../src/fleet/admin-api.ts";
import type { AdminClient } from "../../cli/admin-client.ts";
import { FLEET_COMMANDS } from "../../cli/commands.ts";

/**
 * `npx kvgate deployments list`'s text for a registry that holds a deployment stored before ids
 * and baseUrls were refused control characters: a heartbeat (the register key is on every GPU
 * server) could name itself with an escape sequence that cleared the operator's screen, or a line
 * break that faked a row. The table writes such characters out (\u001b), and keeps its columns.
 */

const row = (id: string, url: string): DeploymentRow => ({
  id,
  url,
  model: "m",
  state: "active",
  source: "heartbeat",
  weight: 1,
  maxInFlight: 256,
  expiresAt: null,
  removeAt: null,
  inFlight: 0,
  takesRequests: true,
  unrouted: null,
  drained: false,
  breaker: "closed",
  restingUntil: null,
  prefixBlocks: 0,
  prefixCapacity: 65536,
  ttftEwmaMs: null,
  promptTokens: null,
  cachedTokens: null,
});

async function listText(rows: DeploymentRow[]): Promise<string> {
  const list: DeploymentList = { object: "list", group: "g", rev: 1, data: rows };
  const api: AdminClient = { url: "https://gw.example", call: async <T>() => list as T };
  const out: string[] = [];
  await FLEET_COMMANDS["deployments list"]?.(api, { group: "g" }, { out: (t) => out.push(t), note: () => undefined, sleep: async () => undefined }, []);
  return out.join("\n");
}

describe("npx kvgate deployments list", () => {
  it("says why a registered server its group routes nothing takes no request", async () => {
    const text = await listText([{ ...row("gpu-left-out", "http://10.0.0.9:8000"), takesRequests: false, unrouted: "binding_not_allowed" }]);
    expect(text.split("\n")[1]).toMatch(/^gpu-left-out\s+active\s+0\s+no \(binding_not_allowed\)\s/);
  });

  it("writes out the control characters of a stored id and url, one line a deployment", async () => {
    const text = await listText([row("gpu\u001b[2J\u001b[31mpwned\r\nfake-row", "http://10.0.0.9:8000/\u001b]8;;x\u0007"), row("tab\there\u009b", "http://10.0.0.1:8000")]);
    expect(text).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f]/);
    const lines = text.split("\n");
    expect(lines).toHaveLength(3);
    expect(lines[1]).toMatch(/^gpu\\u001b\[2J\\u001b\[31mpwned\\u000d\\u000afake-row\s+active\s/);
    expect(lines[1]).toContain("http://10.0.0.9:8000/\\u001b]8;;x\\u0007");
    expect(lines[2]).toMatch(/^tab\\u0009here\\u009b\s+active\s/);
    // The columns stay aligned: the escaped id is as wide as it prints.
    expect(lines[2]?.indexOf("active")).toBe(lines[1]?.indexOf("active"));
  });
});
