import OpenAI from "openai";
import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config/load.ts";

const deployment = { baseUrl: "http://127.0.0.1:9001", model: "m" };
const valid = { modelGroups: [{ name: "llama", aliases: ["gpt-4o"], deployments: [deployment, { ...deployment, baseUrl: "http://127.0.0.1:9002/" }] }] };

function errorOf(raw: unknown): string {
  const r = parseConfig(raw);
  if (r.ok) throw new Error("expected the config to be rejected");
  return r.error;
}

describe("config", () => {
  it("fills defaults and indexes names and aliases", () => {
    const r = parseConfig(JSON.stringify(valid));
    if (!r.ok) throw new Error(r.error);
    const g = r.config.byModel.get("gpt-4o");
    expect(g?.name).toBe("llama");
    expect(g?.strategy).toBe("prefix-aware");
    expect(g?.deployments.map((d) => d.id)).toEqual(["127.0.0.1:9001", "127.0.0.1:9002"]);
    expect(g?.deployments[1]?.baseUrl).toBe("http://127.0.0.1:9002");
    expect(r.config.auth).toEqual({ masterKeyEnv: "KVGATE_MASTER_KEY", adminKeyEnv: "KVGATE_ADMIN_KEY", registerKeyEnv: "KVGATE_REGISTER_KEY", metricsKeyEnv: "KVGATE_METRICS_KEY", registrationSecrets: [] });
    expect(r.config.cors.allowedOrigins).toEqual([]);
    expect(r.config.limits.maxBodyBytes).toBeGreaterThan(0);
  });

  it("ends a non-streamed answer by default before the official SDKs give up on it themselves", () => {
    // Their timeout (600 s, openai-python's too) starts before the request leaves the client, the
    // gateway's at its upstream attempt: at equal limits the SDK always times out first, never
    // reads the 504's x-should-retry: false, and sends the generation again, twice. A minute apart
    // leaves room for a first attempt that failed and what precedes each attempt.
    const r = parseConfig(JSON.stringify(valid));
    if (!r.ok) throw new Error(r.error);
    expect(r.config.byModel.get("llama")?.nonStreamTimeoutMs).toBeLessThanOrEqual(OpenAI.DEFAULT_TIMEOUT - 60_000);
  });

  it("takes a config without model groups: the fleet registry holds them, the config only seeds it", () => {
    for (const raw of [{}, { modelGroups: [] }]) {
      const r = parseConfig(raw);
      if (!r.ok) throw new Error(r.error);
      expect(r.config.groups).toEqual([]);
    }
  });

  it("seeds the fleet only when it gives modelGroups ([] too: no servers of its own), with the groups as written beside them filled in", () => {
    const without = parseConfig("{ /* the fleet is the admin API's */ }");
    if (!without.ok) throw new Error(without.error);
    expect(without.config.seed).toBeNull();
    const empty = parseConfig({ modelGroups: [] });
    if (!empty.ok) throw new Error(empty.error);
    expect(empty.config.seed).toEqual({ groups: [], written: [] });
    const one = parseConfig(`{ "modelGroups": [{ "name": "a" }] }`);
    if (!one.ok) throw new Error(one.error);
    expect(one.config.seed?.written).toEqual([{ name: "a" }]);
    expect(one.config.seed?.groups[0]).toMatchObject({ name: "a", deployments: [], strategy: "prefix-aware" });
  });

  it.each([
    ["not JSON", "{", /not valid JSON/],
    ["bad URL", { modelGroups: [{ name: "a", deployments: [{ baseUrl: "ftp://x", model: "m" }] }] }, /modelGroups\[0\]\.deployments\[0\]\.baseUrl must be an http:\/\/ or https:\/\/ URL/],
    ["unknown strategy", { modelGroups: [{ name: "a", strategy: "fastest", deployments: [deployment] }] }, /modelGroups\[0\]\.strategy must be one of "round-robin"/],
    ["inline API key", { modelGroups: [{ name: "a", deployments: [{ ...deployment, apiKey: "sk-live" }] }] }, /unknown key apiKey/],
    ["key env that is no identifier", { modelGroups: [{ name: "a", deployments: [{ ...deployment, apiKeyEnv: "sk-live" }] }] }, /apiKeyEnv must name a Worker secret: letters, digits and _, not starting with a digit/],
    ["negative saturation", { modelGroups: [{ name: "a", saturation: 0, deployments: [deployment] }] }, /modelGroups\[0\]\.saturation must be >= 1/],
    ["alias clash", { modelGroups: [{ name: "a", deployments: [deployment] }, { name: "b", aliases: ["a"], deployments: [deployment] }] }, /modelGroups\[1\]\.aliases\[0\] "a" is already/],
    ["an alias listed twice", { modelGroups: [{ name: "a", aliases: ["b", "b"], deployments: [deployment] }] }, /^config: modelGroups\[0\]\.aliases\[1\] "b" is listed twice in the group$/],
    ["the group's own name as its alias", { modelGroups: [{ name: "a", aliases: ["a"], deployments: [deployment] }] }, /^config: modelGroups\[0\]\.aliases\[0\] "a" is the group's own name$/],
    ["credentials in a base URL", { modelGroups: [{ name: "a", deployments: [{ ...deployment, baseUrl: "http://user:hunter2@10.0.0.1:8000" }] }] }, /deployments\[0\]\.baseUrl must not carry credentials/],
    ["a user name in a base URL", { modelGroups: [{ name: "a", deployments: [{ ...deployment, baseUrl: "https://user@gpu.example" }] }] }, /baseUrl must not carry credentials/],
    ["credentials after a third slash (the URL parser skips it)", { modelGroups: [{ name: "a", deployments: [{ ...deployment, baseUrl: "https:///user:s3cret@gpu.example.com" }] }] }, /^config: modelGroups\[0\]\.deployments\[0\]\.baseUrl must not carry credentials/],
    ["a password without a user name", { modelGroups: [{ name: "a", deployments: [{ ...deployment, baseUrl: "https://:s3cret@gpu.example.com" }] }] }, /baseUrl must not carry credentials/],
    ["/v1 after a third slash", { modelGroups: [{ name: "a", deployments: [{ ...deployment, baseUrl: "https:///gpu:8000/v1" }] }] }, /baseUrl must be the server's root, without \/v1/],
    ["/v1 reached through a dot segment", { modelGroups: [{ name: "a", deployments: [{ ...deployment, baseUrl: "https://gpu:8000/x/../v1" }] }] }, /baseUrl must be the server's root, without \/v1/],
    ["an empty query", { modelGroups: [{ name: "a", deployments: [{ ...deployment, baseUrl: "https://gpu:8000?" }] }] }, /baseUrl must have no query or fragment/],
    ["duplicate deployment id", { modelGroups: [{ name: "a", deployments: [deployment, deployment] }] }, /deployments\[1\]\.id "127\.0\.0\.1:9001" is used twice/],
  ])("rejects %s, naming the field", (_name, raw, message) => {
    expect(errorOf(raw)).toMatch(message);
  });

  it("refuses the removed dev mode, saying why and what to do instead", () => {
    for (const value of [true, false]) {
      const message = errorOf({ ...valid, auth: { devOpenOnLoopback: value } });
      expect(message).toMatch(/^config: auth\.devOpenOnLoopback was removed: /);
      expect(message).toContain("Host header");
      expect(message).toContain("Delete the setting");
      expect(message).toContain("KVGATE_API_KEY=<key>");
    }
  });

  it("never echoes a secret-looking value in its message", () => {
    expect(errorOf({ modelGroups: [{ name: "a", deployments: [{ ...deployment, apiKey: "sk-live-123" }] }] })).not.toContain("sk-live-123");
    expect(errorOf({ modelGroups: [{ name: "a", deployments: [{ ...deployment, baseUrl: "http://user:hunter2@10.0.0.1:8000" }] }] })).not.toContain("hunter2");
    expect(errorOf({ modelGroups: [{ name: "a", deployments: [{ ...deployment, baseUrl: "https:///user:hunter2@10.0.0.1:8000" }] }] })).not.toContain("hunter2");
  });

  it("holds a base URL as fetch will read it, so the path appended to it makes one URL: a trailing backslash is a slash, stripped as one (review s67)", () => {
    const baseUrls = ["https://gpu.example.com/llama\\", "https://gpu.example.com/llama/\\/", "https://gpu.example.com\\llama/"];
    const r = parseConfig({ modelGroups: [{ name: "a", deployments: baseUrls.map((baseUrl, i) => ({ ...deployment, id: `d${i}`, baseUrl })) }] });
    if (!r.ok) throw new Error(r.error);
    const held = r.config.groups[0]?.deployments.map((d) => d.baseUrl);
    expect(held).toEqual(baseUrls.map(() => "https://gpu.example.com/llama"));
    // As the gateway asks for an endpoint (workers/gateway/attempt.ts): one slash between the prefix and /v1.
    expect(held?.map((b) => new URL(`${b}/v1/chat/completions`).pathname)).toEqual(baseUrls.map(() => "/llama/v1/chat/completions"));
  });

  it("takes an @ in a base URL's path as what it is", () => {
    const r = parseConfig({ modelGroups: [{ name: "a", deployments: [{ ...deployment, baseUrl: "http://10.0.0.1:8000/team@gpu/x@y" }] }] });
    expect(r.ok).toBe(true);
  });
});
