import { afterAll, describe, expect, it } from "vitest";
import { startGateway, type ServedWorker } from "../../bench/harness/gateway.ts";

// The deployed bundle, in workerd, with a config that points nowhere valid: every request must
// get a 500 that names the field and the reason — never a crash, never a silent default.
describe("a gateway started with a bad config", () => {
  let gateway: ServedWorker | undefined;
  afterAll(async () => {
    await gateway?.dispose();
  });

  it("answers 500 config_invalid naming the field", async () => {
    gateway = await startGateway({ config: { modelGroups: [{ name: "m", strategy: "fastest" as "random", deployments: [{ baseUrl: "http://127.0.0.1:1", model: "x" }] }] } });
    const res = await fetch(`${gateway.url}/v1/models`);
    expect(res.status).toBe(500);
    const body = (await res.json()) as { error: { code: string; message: string; type: string } };
    expect(body.error.code).toBe("config_invalid");
    expect(body.error.type).toBe("server_error");
    expect(body.error.message).toMatch(/modelGroups\[0\]\.strategy must be one of/);
  }, 60_000);

  it("says a config bound as a TOML table must be one JSON string, not that it is not set", async () => {
    await gateway?.dispose();
    gateway = await startGateway({ config: { modelGroups: [{ name: "m", deployments: [{ baseUrl: "http://127.0.0.1:1", model: "x" }] }] }, configAsTable: true });
    const res = await fetch(`${gateway.url}/v1/models`);
    expect(res.status).toBe(500);
    const body = (await res.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("config_invalid");
    expect(body.error.message).toContain("KVGATE_CONFIG is a TOML table: give it as one JSON string under [vars]");
  }, 60_000);
});
