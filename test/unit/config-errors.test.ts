import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config/load.ts";

const deployment = { baseUrl: "http://127.0.0.1:9001", model: "m" };

function errorsOf(raw: unknown): string[] {
  const r = parseConfig(raw);
  if (r.ok) throw new Error("expected the config to be rejected");
  return r.errors ?? [r.error];
}

describe("a config with several problems", () => {
  it("names every one at once, and says them all in its one-line error", () => {
    const raw = { cors: { allowedOrigins: "*" }, modelGroups: [{ name: "a", strategy: "fastest", saturation: 0, deployments: [{ baseUrl: "ftp://x", model: "m" }] }] };
    expect(errorsOf(raw)).toEqual([
      "cors.allowedOrigins must be an array",
      'modelGroups[0].strategy must be one of "round-robin", "random", "least-loaded", "prefix-aware"',
      "modelGroups[0].saturation must be >= 1",
      "modelGroups[0].deployments[0].baseUrl must be an http:// or https:// URL, the server's root (http://gpu:8000)",
    ]);
    const r = parseConfig(raw);
    if (!r.ok) expect(r.error).toBe(`config: ${errorsOf(raw).join("; ")}`);
  });

  it("refuses a header named __proto__ rather than dropping it (JSON as a file or a request body holds it as a key)", () => {
    const raw = `{"modelGroups":[{"name":"a","deployments":[{"baseUrl":"http://127.0.0.1:9001","model":"m","headersFromEnv":{"__proto__":"ACCESS_ID","x-b":"ACCESS_SECRET"}}]}]}`;
    expect(errorsOf(raw)).toEqual(["modelGroups[0].deployments[0].headersFromEnv.__proto__ is a name no header may have (a JavaScript object's prototype)"]);
  });

  it("names a deployment's scheduling policy that no server has", () => {
    expect(errorsOf({ modelGroups: [{ name: "a", deployments: [{ ...deployment, schedulingPolicy: "shortest-first" }] }] })).toEqual(['modelGroups[0].deployments[0].schedulingPolicy must be one of "fcfs", "priority"']);
  });

  it("names a group of more deployments than a group may hold (the admin API's too_many_deployments)", () => {
    const deployments = Array.from({ length: 1025 }, (_, i) => ({ ...deployment, id: `d${i}` }));
    expect(errorsOf({ modelGroups: [{ name: "a", deployments }] })).toEqual(["modelGroups[0].deployments must have at most 1024 item(s)"]);
  });

  it("names the config itself when it is not an object", () => {
    expect(errorsOf("[1]")).toEqual(["the config must be an object"]);
  });
});

describe("a name or path its pattern refuses", () => {
  it("is told what the field must be, never that it must be a valid regex", () => {
    const raw = {
      auth: { masterKeyEnv: "kvgate-master", registrationSecrets: ["1KEY"] },
      modelGroups: [{ name: "a\u0007b", breaker: { probePath: "health" }, deployments: [{ ...deployment, apiKeyEnv: "vllm-key", binding: "GPU VPC", headersFromEnv: { "x-token": "x.token" } }] }],
    };
    const secret = "must name a Worker secret: letters, digits and _, not starting with a digit";
    expect(errorsOf(raw)).toEqual([
      `auth.masterKeyEnv ${secret}`,
      `auth.registrationSecrets[0] ${secret}`,
      "modelGroups[0].name must not contain control characters",
      "modelGroups[0].breaker.probePath must be a path starting with /, without spaces (e.g. /health)",
      `modelGroups[0].deployments[0].apiKeyEnv ${secret}`,
      "modelGroups[0].deployments[0].binding must name a binding: letters, digits and _, not starting with a digit",
      `modelGroups[0].deployments[0].headersFromEnv.x-token ${secret}`,
    ]);
  });

  it("takes what the pattern allows: lower case, a leading _, digits after the first character", () => {
    const r = parseConfig({ auth: { masterKeyEnv: "_master_2" }, modelGroups: [{ name: "a", breaker: { probePath: "/v1/models?x=1" }, deployments: [{ ...deployment, apiKeyEnv: "vllm_key", binding: "gpu_vpc9" }] }] });
    expect(r.ok, r.ok ? "" : r.error).toBe(true);
  });
});

describe("a config with comments (JSONC), as the Worker reads KVGATE_CONFIG", () => {
  it("is taken, and resolves as its plain JSON would", () => {
    const jsonc = `{
      // one group
      "modelGroups": [{ "name": "a", "deployments": [{ "baseUrl": "http://127.0.0.1:9001", "model": "m", },], },],
    }`;
    const a = parseConfig(jsonc);
    const b = parseConfig(JSON.stringify({ modelGroups: [{ name: "a", deployments: [deployment] }] }));
    if (!a.ok || !b.ok) throw new Error("expected both to parse");
    expect(a.config.groups[0]?.version).toBe(b.config.groups[0]?.version);
  });

  it("that is not JSON says so, and where, quoting none of its text", () => {
    expect(errorsOf('{\n  "modelGroups": [\n}')).toEqual([expect.stringMatching(/^config is not valid JSON: Unexpected token '\}'/)]);
  });
});

describe("a group's location hint", () => {
  it("takes Cloudflare's values", () => {
    for (const hint of ["wnam", "enam", "sam", "weur", "eeur", "apac", "apac-ne", "apac-se", "oc", "afr", "me"]) {
      const r = parseConfig({ modelGroups: [{ name: "a", locationHint: hint, deployments: [deployment] }] });
      if (!r.ok) throw new Error(r.error);
      expect(r.config.groups[0]?.locationHint).toBe(hint);
    }
  });

  it("refuses any other, naming the field and the values", () => {
    expect(errorsOf({ modelGroups: [{ name: "a", locationHint: "eu-west-1", deployments: [deployment] }] })).toEqual([
      'modelGroups[0].locationHint must be one of "wnam", "enam", "sam", "weur", "eeur", "apac", "apac-ne", "apac-se", "oc", "afr", "me"',
    ]);
  });

  it("is optional, and a config without one keeps its group versions", () => {
    const r = parseConfig({ modelGroups: [{ name: "a", deployments: [deployment] }] });
    if (!r.ok) throw new Error(r.error);
    expect(r.config.groups[0]?.locationHint).toBeUndefined();
    expect(Object.keys(r.config.groups[0] ?? {})).not.toContain("locationHint");
  });
});

describe("a deployment naming one of the gateway's own keys", () => {
  it("is a config error naming the field and the auth setting, whatever the key's name", () => {
    const group = (d: Record<string, unknown>) => ({ modelGroups: [{ name: "a", deployments: [deployment, { ...deployment, id: "b", ...d }] }] });
    expect(errorsOf(group({ apiKeyEnv: "KVGATE_ADMIN_KEY" }))).toEqual([
      "modelGroups[0].deployments[1].apiKeyEnv names KVGATE_ADMIN_KEY, the gateway's own key (auth.adminKeyEnv): a deployment is sent the secrets it names, and no upstream may hold the gateway's keys",
    ]);
    expect(errorsOf(group({ headersFromEnv: { "x-a": "KVGATE_MASTER_KEY", "x-b": "KVGATE_METRICS_KEY" } }))).toEqual([
      expect.stringMatching(/^modelGroups\[0\]\.deployments\[1\]\.headersFromEnv\.x-a names KVGATE_MASTER_KEY, the gateway's own key \(auth\.masterKeyEnv\)/),
      expect.stringMatching(/^modelGroups\[0\]\.deployments\[1\]\.headersFromEnv\.x-b names KVGATE_METRICS_KEY, the gateway's own key \(auth\.metricsKeyEnv\)/),
    ]);
    // The names are the config's: a key renamed is still the gateway's, and the default name is free again.
    const renamed = { auth: { registerKeyEnv: "GPU_REGISTER_KEY" }, ...group({ apiKeyEnv: "GPU_REGISTER_KEY" }) };
    expect(errorsOf(renamed)).toEqual([expect.stringMatching(/^modelGroups\[0\]\.deployments\[1\]\.apiKeyEnv names GPU_REGISTER_KEY, the gateway's own key \(auth\.registerKeyEnv\)/)]);
    expect(parseConfig({ auth: { registerKeyEnv: "GPU_REGISTER_KEY" }, ...group({ apiKeyEnv: "KVGATE_REGISTER_KEY" }) }).ok).toBe(true);
  });
});

describe("auth.registrationSecrets", () => {
  it("is empty unless set, and takes secret names", () => {
    const r = parseConfig({ auth: { registrationSecrets: ["ACCESS_CLIENT_ID", "VLLM_KEY"] } });
    if (!r.ok) throw new Error(r.error);
    expect(r.config.auth.registrationSecrets).toEqual(["ACCESS_CLIENT_ID", "VLLM_KEY"]);
    const plain = parseConfig({});
    if (!plain.ok) throw new Error(plain.error);
    expect(plain.config.auth.registrationSecrets).toEqual([]);
  });

  it("may not list one of the gateway's own keys", () => {
    expect(errorsOf({ auth: { registrationSecrets: ["VLLM_KEY", "KVGATE_ADMIN_KEY"] } })).toEqual([expect.stringMatching(/^auth\.registrationSecrets\[1\] names KVGATE_ADMIN_KEY, the gateway's own key \(auth\.adminKeyEnv\)/)]);
    expect(errorsOf({ auth: { registrationSecrets: ["not a name"] } })).toEqual([expect.stringMatching(/^auth\.registrationSecrets\[0\] /)]);
  });
});

describe("a config a request would break on, refused when it loads", () => {
  const group = (d: Record<string, unknown>) => ({ modelGroups: [{ name: "a", deployments: [{ ...deployment, ...d }] }] });

  it("refuses a baseUrl that names the API's /v1 (the gateway adds it: /v1/v1/chat/completions is a 404), a query or a fragment", () => {
    for (const baseUrl of ["http://gpu:8000/v1", "http://gpu:8000/v1/", "https://gpu.example/serve/V1"]) {
      expect(errorsOf(group({ baseUrl }))).toEqual([expect.stringMatching(/^modelGroups\[0\]\.deployments\[0\]\.baseUrl must be the server's root, without \/v1: the gateway adds \/v1\/chat\/completions/)]);
    }
    for (const baseUrl of ["http://gpu:8000/?token=x", "http://gpu:8000#frag"]) {
      expect(errorsOf(group({ baseUrl }))).toEqual([expect.stringMatching(/baseUrl must have no query or fragment/)]);
    }
    // A path prefix before the API's (a reverse proxy's) is the server's root.
    for (const baseUrl of ["http://proxy:8080/llama", "http://gpu:8000/v1beta", "http://gpu:8000/"]) expect(parseConfig(group({ baseUrl })).ok).toBe(true);
  });

  it("refuses a CORS origin no browser sends, which would match nothing; * only alone", () => {
    for (const origin of ["https://app.example/", "https://app.example/path", "https://*.example", "app.example", "https://App.example", "https://app.example:443"]) {
      expect(errorsOf({ cors: { allowedOrigins: [origin] }, ...group({}) })).toEqual([expect.stringMatching(/^cors\.allowedOrigins\[0\] must be an exact origin/)]);
    }
    expect(errorsOf({ cors: { allowedOrigins: ["https://app.example", "*"] }, ...group({}) })).toEqual(['cors.allowedOrigins "*" (any origin) must be alone: with others listed it still lets in any']);
    for (const allowedOrigins of [["*"], ["https://app.example", "http://localhost:5173"], []]) expect(parseConfig({ cors: { allowedOrigins }, ...group({}) }).ok).toBe(true);
  });

  it("refuses two of the gateway's keys in one secret: each key opens its own door", () => {
    expect(errorsOf({ auth: { registerKeyEnv: "KVGATE_MASTER_KEY" }, ...group({}) })).toEqual(["auth.registerKeyEnv names KVGATE_MASTER_KEY, which auth.masterKeyEnv names too: each of the gateway's keys needs its own secret"]);
  });

  it("bounds the body a request may send: one held several times over must fit in an isolate's 128 MB", () => {
    expect(errorsOf({ limits: { maxBodyBytes: 100 * 1024 * 1024 }, ...group({}) })).toEqual(["limits.maxBodyBytes must be <= 16777216"]);
    expect(parseConfig({ limits: { maxBodyBytes: 16 * 1024 * 1024 }, ...group({}) }).ok).toBe(true);
  });
});
