import { describe, expect, it } from "vitest";
import { parseConfig, type ResolvedConfig } from "../../src/config/load.ts";
import { envNames } from "../../scripts/config-check.ts";

function configOf(input: unknown): ResolvedConfig {
  const parsed = parseConfig(JSON.stringify(input));
  if (!parsed.ok) throw new Error(parsed.error);
  return parsed.config;
}

/** Whether check-config lists each of the gateway's keys among the secrets the config reads (needed) or as optional. */
function keysOf(input: unknown): { needed: string[]; optional: string[] } {
  const names = envNames(configOf(input));
  return { needed: names.secrets, optional: names.optional.map((o) => o.name) };
}

describe("the keys check-config says a config cannot do without (envNames)", () => {
  it("a group with no deployments that takes no heartbeat (registration false): the admin key, not the register key (review s67)", () => {
    // Its every heartbeat is refused (403): only the admin API can give it a server.
    expect(keysOf({ modelGroups: [{ name: "tenant-a", registration: false }] })).toEqual({
      needed: ["KVGATE_MASTER_KEY", "KVGATE_ADMIN_KEY"],
      optional: ["KVGATE_REGISTER_KEY", "KVGATE_METRICS_KEY"],
    });
  });

  it("a group with no deployments that takes heartbeats: the register key, with the secrets heartbeats may name", () => {
    expect(keysOf({ auth: { registrationSecrets: ["VLLM_KEY"] }, modelGroups: [{ name: "m" }] })).toEqual({
      needed: ["KVGATE_MASTER_KEY", "KVGATE_REGISTER_KEY", "VLLM_KEY"],
      optional: ["KVGATE_ADMIN_KEY", "KVGATE_METRICS_KEY"],
    });
  });

  it("both kinds of group: both keys", () => {
    expect(keysOf({ modelGroups: [{ name: "m" }, { name: "tenant-a", registration: false }] }).needed).toEqual(["KVGATE_MASTER_KEY", "KVGATE_ADMIN_KEY", "KVGATE_REGISTER_KEY"]);
  });

  it("every group with its deployments, registration false or not: neither key", () => {
    const deployments = [{ baseUrl: "https://gpu.example.com", model: "m" }];
    expect(keysOf({ modelGroups: [{ name: "m", deployments }, { name: "n", registration: false, deployments }] }).needed).toEqual(["KVGATE_MASTER_KEY"]);
  });
});
