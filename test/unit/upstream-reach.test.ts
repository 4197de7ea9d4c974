import { describe, expect, it } from "vitest";
import { parseConfig } from "../../src/config/load.ts";
import { AUTH_DEFAULTS } from "../../src/config/schema.ts";
import { gatewayKeys, reachOf, reachProblems, resolveReach, type UpstreamFetcher } from "../../src/config/upstream-access.ts";
import { parseUpstreamError } from "../../src/upstream/error-body.ts";

const vpc: UpstreamFetcher = { fetch: () => Promise.resolve(new Response("ok")) };
const ACCESS = { "CF-Access-Client-Id": "ACCESS_CLIENT_ID", "CF-Access-Client-Secret": "ACCESS_CLIENT_SECRET" };
const SECRETS = { ACCESS_CLIENT_ID: "id.access", ACCESS_CLIENT_SECRET: "s3cr3t-value" };
/** The gateway's own keys, by the names a config without `auth` gives them. */
const KEYS = gatewayKeys(AUTH_DEFAULTS);

function errorsOf(raw: unknown): string[] {
  const r = parseConfig(raw);
  if (r.ok) throw new Error("expected the config to be rejected");
  return r.errors ?? [r.error];
}

const withDeployment = (d: Record<string, unknown>) => ({ modelGroups: [{ name: "a", deployments: [{ baseUrl: "http://10.0.0.1:8000", model: "m", ...d }] }] });

describe("a deployment's binding and secret headers in the config", () => {
  it("are taken as names, and resolved with the deployment", () => {
    const r = parseConfig(withDeployment({ binding: "GPU_VPC", headersFromEnv: ACCESS }));
    if (!r.ok) throw new Error(r.error);
    expect(r.config.groups[0]?.deployments[0]).toMatchObject({ binding: "GPU_VPC", headersFromEnv: ACCESS });
  });

  it("leave the versions of configs that use neither as they were", () => {
    const plain = parseConfig(withDeployment({}));
    if (!plain.ok) throw new Error(plain.error);
    // The hash of this exact group before the fields existed (src/config/version.ts).
    const again = parseConfig(withDeployment({ binding: undefined, headersFromEnv: undefined }));
    if (!again.ok) throw new Error(again.error);
    expect(again.config.groups[0]?.version).toBe(plain.config.groups[0]?.version);
  });

  it.each([
    ["a header the gateway sets itself", { headersFromEnv: { Authorization: "TOKEN" } }, "modelGroups[0].deployments[0].headersFromEnv.Authorization is a header the gateway sets itself (an upstream API key goes in apiKeyEnv)"],
    ["the same in another case", { headersFromEnv: { "X-Request-Id": "ID" } }, "modelGroups[0].deployments[0].headersFromEnv.X-Request-Id is a header the gateway sets itself (an upstream API key goes in apiKeyEnv)"],
    ["one a realtime handshake sets", { headersFromEnv: { Upgrade: "UP" } }, "modelGroups[0].deployments[0].headersFromEnv.Upgrade is a header the gateway sets itself (an upstream API key goes in apiKeyEnv)"],
    ["a header name with a space", { headersFromEnv: { "CF Access": "ID" } }, "modelGroups[0].deployments[0].headersFromEnv.CF Access must be a header name (letters, digits and -)"],
    ["a secret's value where its name goes", { headersFromEnv: { "CF-Access-Client-Secret": "abc-123.def" } }, "modelGroups[0].deployments[0].headersFromEnv.CF-Access-Client-Secret must name a Worker secret: letters, digits and _, not starting with a digit"],
    ["a binding that is no name", { binding: "gpu vpc" }, "modelGroups[0].deployments[0].binding must name a binding: letters, digits and _, not starting with a digit"],
  ])("refuses %s, naming the field", (_what, d, message) => {
    expect(errorsOf(withDeployment(d))).toEqual([message]);
  });
});

describe("a deployment's reach, resolved from the Worker's env", () => {
  it("is the runtime's own fetch for a deployment that names nothing", () => {
    expect(resolveReach({}, {}, KEYS)).toEqual({ ok: true, via: null, headers: null, authorization: null, secrets: [] });
  });

  it("goes through the binding with the headers' values", () => {
    const reach = resolveReach({ binding: "GPU_VPC", headersFromEnv: ACCESS }, { GPU_VPC: vpc, ...SECRETS }, KEYS);
    // What it sends that an upstream's error might echo: taken out of what such an error says (src/upstream/error-body.ts).
    expect(reach).toEqual({ ok: true, via: vpc, headers: { "CF-Access-Client-Id": "id.access", "CF-Access-Client-Secret": "s3cr3t-value" }, authorization: null, secrets: ["id.access", "s3cr3t-value"] });
  });

  it("is resolved once per deployment object", () => {
    const d = { headersFromEnv: ACCESS };
    const env: Record<string, unknown> = { ...SECRETS };
    const first = reachOf(d, env, KEYS);
    env.ACCESS_CLIENT_ID = "rotated";
    expect(reachOf(d, env, KEYS)).toBe(first);
  });

  it("names every missing, empty or wrong binding and secret, and never a value", () => {
    const env = { GPU_VPC: "not a binding", ACCESS_CLIENT_ID: "", ACCESS_CLIENT_SECRET: "line\nbreak-s3cr3t", TOKEN: vpc };
    const reach = resolveReach({ binding: "GPU_VPC", headersFromEnv: { ...ACCESS, "X-Token": "TOKEN", "X-Other": "UNSET" } }, env, KEYS);
    if (reach.ok) throw new Error("expected problems");
    expect(reach.problems).toEqual([
      { field: "binding", message: '"GPU_VPC" is not a Workers VPC binding of this Worker (declare it in wrangler.toml: vpc_services or vpc_networks)' },
      { field: "headersFromEnv.CF-Access-Client-Id", message: "names ACCESS_CLIENT_ID, which is empty (npx wrangler secret put ACCESS_CLIENT_ID --env production)" },
      { field: "headersFromEnv.CF-Access-Client-Secret", message: "names ACCESS_CLIENT_SECRET, which holds a line break, which no header value may" },
      { field: "headersFromEnv.X-Token", message: "names TOKEN, which is a binding, not a secret" },
      { field: "headersFromEnv.X-Other", message: "names UNSET, which is not set (npx wrangler secret put UNSET --env production)" },
    ]);
    expect(JSON.stringify(reach)).not.toContain("s3cr3t");
  });

  it("reports problems with their deployments' config paths", () => {
    const groups = [{ deployments: [{}, { binding: "NOPE" }] }];
    expect(reachProblems(groups, {}, KEYS)).toEqual([{ at: "modelGroups[0].deployments[1]", problem: { field: "binding", message: '"NOPE" is not a Workers VPC binding of this Worker (declare it in wrangler.toml: vpc_services or vpc_networks)' } }]);
  });
});

describe("a deployment's API key, as every call to it carries it", () => {
  it("is its apiKeyEnv secret as a bearer token; none when it names none or the secret is unset or empty", () => {
    const authorization = (d: { apiKeyEnv?: string }, env: Record<string, unknown>) => {
      const reach = resolveReach(d, env, KEYS);
      return reach.ok ? reach.authorization : reach.problems;
    };
    expect(authorization({ apiKeyEnv: "VLLM_KEY" }, { VLLM_KEY: "sk-up" })).toBe("Bearer sk-up");
    expect(authorization({ apiKeyEnv: undefined }, { VLLM_KEY: "sk-up" })).toBeNull();
    expect(authorization({ apiKeyEnv: "VLLM_KEY" }, {})).toBeNull();
    expect(authorization({ apiKeyEnv: "VLLM_KEY" }, { VLLM_KEY: "" })).toBeNull();
  });
});

describe("a secret with whitespace around it (a trailing line break from .dev.vars, a paste)", () => {
  it("is sent as fetch sends it, trimmed, and that value is what an upstream's error that echoes it has taken out", () => {
    const reach = resolveReach({ apiKeyEnv: "K", headersFromEnv: { "X-Token": "T" } }, { K: "sk-up\n", T: " tok-s3cr3t\t" }, KEYS);
    if (!reach.ok) throw new Error("expected a reach");
    // An engine (or a proxy) that repeats the headers it was sent, trimmed, in a 4xx, whose message reaches the client.
    const echoed = parseUpstreamError('{"error":{"message":"bad key: Bearer sk-up, token tok-s3cr3t"}}', reach.secrets)?.message ?? "";
    expect(echoed).not.toMatch(/sk-up|tok-s3cr3t/);
    expect({ authorization: reach.authorization, headers: reach.headers }).toEqual({ authorization: "Bearer sk-up", headers: { "X-Token": "tok-s3cr3t" } });
  });

  it("holding a line break inside is refused, naming the secret, never its value: not sent to fail every call as an unreachable server", () => {
    const reach = resolveReach({ apiKeyEnv: "K" }, { K: "sk-a\nsk-b-s3cr3t" }, KEYS);
    expect(reach).toEqual({ ok: false, problems: [{ field: "apiKeyEnv", message: "names K, which holds a line break, which no header value may" }] });
    for (const inner of ["sk-a\r\nb", "sk-a\u0000b"]) expect(resolveReach({ apiKeyEnv: "K" }, { K: inner }, KEYS).ok, JSON.stringify(inner)).toBe(false);
  });

  it("that is whitespace alone is as empty", () => {
    expect(resolveReach({ apiKeyEnv: "K" }, { K: " \n" }, KEYS)).toMatchObject({ ok: true, authorization: null, secrets: [] });
    const header = resolveReach({ headersFromEnv: { "X-Token": "T" } }, { T: "\n" }, KEYS);
    expect(header).toEqual({ ok: false, problems: [{ field: "headersFromEnv.X-Token", message: "names T, which is empty (npx wrangler secret put T --env production)" }] });
  });
});

describe("what a deployment is sent, whatever brought it", () => {
  const env = { KVGATE_ADMIN_KEY: "sk-admin-s3cr3t", KVGATE_MASTER_KEY: "sk-master-s3cr3t", K_ADMIN: "sk-renamed-s3cr3t", GPU_VPC: vpc, ...SECRETS };

  it("is never one of the gateway's own keys: the deployment is refused, naming the field and the key, never a value", () => {
    const bearer = reachOf({ apiKeyEnv: "KVGATE_ADMIN_KEY" }, env, KEYS);
    expect(bearer).toEqual({ ok: false, problems: [{ field: "apiKeyEnv", message: expect.stringMatching(/^names KVGATE_ADMIN_KEY, the gateway's own key \(auth\.adminKeyEnv\)/) }] });
    const header = reachOf({ binding: "GPU_VPC", headersFromEnv: { ...ACCESS, "x-a": "KVGATE_MASTER_KEY" } }, env, KEYS);
    expect(header.ok ? [] : header.problems.map((p) => p.field)).toEqual(["headersFromEnv.x-a"]);
    // The config's names for its keys, not the defaults.
    const renamed = gatewayKeys({ ...AUTH_DEFAULTS, adminKeyEnv: "K_ADMIN" });
    expect(resolveReach({ apiKeyEnv: "K_ADMIN" }, env, renamed).ok).toBe(false);
    expect(JSON.stringify([bearer, header])).not.toContain("s3cr3t");
  });
});
