import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ROOT, runScript, type ScriptRun } from "../support/run-script.ts";

// `npm run check-config` as a user runs it: a child process, its exit code and what it prints.
const check = (args: string[], env: Record<string, string> = {}) => runScript("scripts/check-config.ts", args, env);

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "kvgate-check-config-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function file(name: string, text: string): Promise<string> {
  const path = join(dir, name);
  await writeFile(path, text);
  return path;
}

/** check-config on file `name`, a config of one group with these deployments, that it refuses: where the file is, and what the run printed. */
async function checkDeployments(name: string, deployments: Record<string, string>[]): Promise<{ path: string; r: ScriptRun }> {
  const path = await file(name, JSON.stringify({ modelGroups: [{ name: "a", deployments }] }));
  const r = await check([path]);
  expect(r.code).toBe(1);
  expect(r.stdout).toBe("");
  return { path, r };
}

describe("npm run check-config", () => {
  it("reports every problem at once, one a line, and exits 1", async () => {
    const path = await file(
      "bad.jsonc",
      `{
  // three mistakes, one per line below
  "modelGroups": [{ "name": "a", "strategy": "fastest", "saturation": 0,
                    "deployments": [{ "baseUrl": "ftp://gpu", "model": "m" }] }],
}`,
    );
    const r = await check([path]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr.split("\n")).toEqual([
      `${path}: 3 problems`,
      '  modelGroups[0].strategy must be one of "round-robin", "random", "least-loaded", "prefix-aware"',
      "  modelGroups[0].saturation must be >= 1",
      "  modelGroups[0].deployments[0].baseUrl must be an http:// or https:// URL, the server's root (http://gpu:8000)",
      "",
    ]);
  });

  it("says what a field must be in words, and names the key a misspelled one was meant to be", async () => {
    const path = await file(
      "misspelled.jsonc",
      `{
  "Cors": { "allowedOrigins": ["https://app.example"] },
  "modelGroups": [{ "name": "a", "saturation": "8", "stratgy": "random",
                    "deployments": [{ "baseURL": "http://10.0.0.1:8000", "model": "m", "apikeyEnv": "VLLM_KEY", "colour": "red" }] }],
}`,
    );
    const r = await check([path]);
    expect(r.code).toBe(1);
    expect(r.stderr.split("\n")).toEqual([
      `${path}: 5 problems`,
      "  modelGroups[0].saturation must be a number",
      "  modelGroups[0].deployments[0].baseUrl is required",
      "  modelGroups[0].deployments[0] has unknown keys baseURL (did you mean baseUrl?), apikeyEnv (did you mean apiKeyEnv?), colour",
      "  modelGroups[0] has unknown key stratgy (did you mean strategy?)",
      "  the config has unknown key Cors (did you mean cors?)",
      "",
    ]);
    const top = await check([await file("not-an-object.json", "[1]")]);
    expect(top.stderr).toBe(`${join(dir, "not-an-object.json")}: the config must be an object\n`);
    const lower = await check([await file("lower.json", JSON.stringify({ modelgroups: [{ name: "a", deployments: [{ baseUrl: "http://10.0.0.1:8000", model: "m" }] }] }))]);
    expect(lower.stderr).toBe(`${join(dir, "lower.json")}: the config has unknown key modelgroups (did you mean modelGroups?)\n`);
  });

  it("says what a name or a path must be, not that it must be a valid regex", async () => {
    const path = await file(
      "names.jsonc",
      `{
  "auth": { "masterKeyEnv": "kvgate-master" },
  "modelGroups": [{ "name": "a", "breaker": { "probePath": "health" },
                    "deployments": [{ "baseUrl": "http://10.0.0.1:8000", "model": "m", "apiKeyEnv": "vllm-key", "binding": "GPU VPC" }] }],
}`,
    );
    const r = await check([path]);
    expect(r.code).toBe(1);
    expect(r.stderr.split("\n")).toEqual([
      `${path}: 4 problems`,
      "  auth.masterKeyEnv must name a Worker secret: letters, digits and _, not starting with a digit",
      "  modelGroups[0].breaker.probePath must be a path starting with /, without spaces (e.g. /health)",
      "  modelGroups[0].deployments[0].apiKeyEnv must name a Worker secret: letters, digits and _, not starting with a digit",
      "  modelGroups[0].deployments[0].binding must name a binding: letters, digits and _, not starting with a digit",
      "",
    ]);
  });

  it("refuses a baseUrl by the URL it parses to: a third slash hides neither credentials nor /v1, and the password is never printed", async () => {
    const { path, r } = await checkDeployments("third-slash.json", [
      { id: "creds", baseUrl: "https:///user:s3cret@gpu.example.com", model: "m" },
      { id: "v1", baseUrl: "https:///gpu.example.com:8000/v1", model: "m" },
      { id: "query", baseUrl: "https://gpu.example.com?", model: "m" },
    ]);
    expect(r.stderr.split("\n")).toEqual([
      `${path}: 3 problems`,
      "  modelGroups[0].deployments[0].baseUrl must not carry credentials (user:password@); name a secret in apiKeyEnv instead",
      "  modelGroups[0].deployments[1].baseUrl must be the server's root, without /v1: the gateway adds /v1/chat/completions (http://gpu:8000, not http://gpu:8000/v1)",
      "  modelGroups[0].deployments[2].baseUrl must have no query or fragment: the gateway appends the endpoint's path to it",
      "",
    ]);
    expect(r.stderr).not.toContain("s3cret");
  });

  it("says a baseUrl must be http:// or https://, not that a URL of another scheme (or a host with no scheme) is no valid url", async () => {
    const { path, r } = await checkDeployments("schemes.json", [
      { id: "ws", baseUrl: "ws://gpu.example.com:8000", model: "m" },
      { id: "host-port", baseUrl: "gpu.example.com:8000", model: "m" },
      { id: "ip-port", baseUrl: "10.0.0.1:8000", model: "m" },
      { id: "garbage", baseUrl: "not a url", model: "m" },
    ]);
    const wanted = "must be an http:// or https:// URL, the server's root (http://gpu:8000)";
    expect(r.stderr.split("\n")).toEqual([`${path}: 4 problems`, ...[0, 1, 2, 3].map((i) => `  modelGroups[0].deployments[${i}].baseUrl ${wanted}`), ""]);
  });

  it("refuses control characters in a baseUrl, as in an id: the text is what the admin API and the CLI show, whatever fetch would send", async () => {
    const { path, r } = await checkDeployments("controls.json", [
      { id: "esc", baseUrl: "http://10.0.0.1:8000/\u001b[2Jproxy", model: "m" },
      { id: "c1", baseUrl: "http://10.0.0.1:8000/\u009b31m", model: "m" },
      { id: "gpu\u001b[31m", baseUrl: "http://10.0.0.2:8000", model: "m" },
    ]);
    expect(r.stderr.split("\n")).toEqual([
      `${path}: 3 problems`,
      "  modelGroups[0].deployments[0].baseUrl must not contain control characters",
      "  modelGroups[0].deployments[1].baseUrl must not contain control characters",
      "  modelGroups[0].deployments[2].id must not contain control characters",
      "",
    ]);
  });

  it("refuses a price a key's spend cannot be summed in: past $1,000,000 a million tokens, a request's cost could be Infinity", async () => {
    const deployments = [{ baseUrl: "https://gpu.example", model: "m" }];
    const path = await file("prices.json", JSON.stringify({ modelGroups: [{ name: "a", pricing: { promptUsdPerMillion: 1e308, cachedPromptUsdPerMillion: 2e6, completionUsdPerMillion: 1e6 }, deployments }] }));
    const r = await check([path]);
    expect(r.code).toBe(1);
    expect(r.stderr.split("\n")).toEqual([
      `${path}: 2 problems`,
      "  modelGroups[0].pricing.promptUsdPerMillion must be <= 1000000",
      "  modelGroups[0].pricing.cachedPromptUsdPerMillion must be <= 1000000",
      "",
    ]);
  });

  it("takes a file saved with a UTF-8 byte order mark, as Windows editors write one", async () => {
    const path = await file("bom.jsonc", '\ufeff{ // saved by Notepad\n  "modelGroups": [{ "name": "a", "deployments": [{ "baseUrl": "https://gpu.example", "model": "m" }] }]\n}\n');
    const r = await check([path]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/: ok — a \(prefix-aware, 1 deployment\(s\)\)\n/);
  });

  it("names the groups without pricing, where a virtual key whose only budget is in dollars is refused, and says nothing of them when every group has one", async () => {
    const group = (name: string, priced: boolean) => ({ name, deployments: [{ baseUrl: "https://gpu.example", model: name }], ...(priced ? { pricing: { promptUsdPerMillion: 1, completionUsdPerMillion: 2 } } : {}) });
    const some = await check([await file("unpriced.json", JSON.stringify({ modelGroups: [group("a", true), group("b", false), group("c", false)] }))]);
    expect(some.code, some.stderr).toBe(0);
    expect(some.stderr).toBe("");
    expect(some.stdout).toContain("\n  without pricing (a virtual key whose only budget is budget_usd is refused there, and passes over them as fallbacks): b, c\n");
    const all = await check([await file("priced.json", JSON.stringify({ modelGroups: [group("a", true)] }))]);
    expect(all.code, all.stderr).toBe(0);
    expect(all.stdout).not.toContain("without pricing");
  });

  it("finds a file named relative to the folder npm run was typed in, though npm runs the script at the package's root", async () => {
    await file("here.jsonc", '{ "modelGroups": [{ "name": "here", "deployments": [{ "baseUrl": "https://gpu.example", "model": "m" }] }] }');
    // npm sets INIT_CWD to the folder the command was typed in.
    const byArg = await check(["here.jsonc"], { INIT_CWD: dir });
    expect(byArg.stderr).toBe("");
    expect(byArg.stdout).toMatch(/^here\.jsonc: ok — here /);
    const byEnv = await check([], { INIT_CWD: dir, KVGATE_CONFIG_FILE: "here.jsonc" });
    expect(byEnv.stdout).toMatch(/^here\.jsonc: ok — here /);
  });

  it("says in one line that a file is missing, with no stack, and exits 1", async () => {
    const missing = join(dir, "config.prod.json");
    for (const r of [await check([missing]), await check([], { KVGATE_CONFIG_FILE: missing })]) {
      expect(r.code).toBe(1);
      expect(r.stderr).toBe(`check-config: ${missing}: no such file\n`);
    }
    const folder = await check([dir]);
    expect(folder.stderr).toBe(`check-config: ${dir}: is a directory, not a config file\n`);
  });

  it("prints its usage for --help and -h (exit 0), and refuses another flag in one line (exit 1) rather than looking for a file of that name", async () => {
    for (const flag of ["--help", "-h"]) {
      const r = await check([flag]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/^usage: npm run check-config -- \[config\.json\]/);
      expect(r.stderr).toBe("");
    }
    const bad = await check(["--strict"]);
    expect(bad.code).toBe(1);
    expect(bad.stderr).toBe("check-config: unknown flag --strict (npm run check-config -- --help)\n");
  });

  it("lists the secrets a config needs apart from the optional keys, each of those with what it turns on", async () => {
    const deployments = [{ id: "a", baseUrl: "https://gpu.example.com", model: "m", apiKeyEnv: "VLLM_KEY" }];
    // Priced: the line naming groups without pricing (its own test above) stays out of this one.
    const seeded = await check([await file("secrets-seeded.json", JSON.stringify({ modelGroups: [{ name: "m", pricing: { promptUsdPerMillion: 1, completionUsdPerMillion: 2 }, deployments }] }))]);
    expect(seeded.code, seeded.stderr).toBe(0);
    expect(seeded.stdout.split("\n").slice(1)).toEqual([
      "  secrets it reads: KVGATE_MASTER_KEY, VLLM_KEY",
      "  optional secrets, each turning on what it names (unset, it stays off):",
      "    KVGATE_ADMIN_KEY: the admin API, npx kvgate and GET /metrics",
      "    KVGATE_REGISTER_KEY: heartbeats of GPU servers that register themselves, with a key that opens nothing else",
      "    KVGATE_METRICS_KEY: GET /metrics for a scraper that should not hold the admin key",
      "",
    ]);
    // A config that leaves the fleet out fills it through the admin API: its key is then needed.
    const unseeded = await check([await file("secrets-unseeded.json", JSON.stringify({ auth: { adminKeyEnv: "OPS_KEY" } }))]);
    expect(unseeded.code, unseeded.stderr).toBe(0);
    expect(unseeded.stdout).toContain("  secrets it reads: KVGATE_MASTER_KEY, OPS_KEY\n");
    expect(unseeded.stdout).not.toContain("    OPS_KEY:");
  });

  it("warns of a secret's value pasted where its name goes, which the Worker would otherwise take for a name (review s67)", async () => {
    const pasted = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    const headersFromEnv = { "CF-Access-Client-Id": "ACCESS_CLIENT_ID", "CF-Access-Client-Secret": pasted };
    const r = await check([await file("pasted-value.json", JSON.stringify({ modelGroups: [{ name: "m", deployments: [{ baseUrl: "https://gpu.example.com", model: "m", headersFromEnv }] }] }))]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).toBe("  warning: e3b0c442… looks like a secret's value, not a secret's name: put the value in a secret (npx wrangler secret put ACCESS_CLIENT_SECRET --env production) and write its name in the config\n");
  });

  it("lists as needed the key without which the config's fleet can get no server, and a heartbeat's secrets beside the register key", async () => {
    const pricing = { promptUsdPerMillion: 1, completionUsdPerMillion: 2 };
    const secretsOf = async (name: string, config: unknown): Promise<string[]> => {
      const r = await check([await file(name, JSON.stringify(config))]);
      expect(r.code, r.stderr).toBe(0);
      return r.stdout.split("\n").slice(1);
    };
    // No group: a heartbeat joins a group, never makes one, so only the admin API can add servers.
    expect(await secretsOf("secrets-no-groups.json", { modelGroups: [] })).toEqual([
      "  secrets it reads: KVGATE_MASTER_KEY, KVGATE_ADMIN_KEY",
      "  optional secrets, each turning on what it names (unset, it stays off):",
      "    KVGATE_REGISTER_KEY: heartbeats of GPU servers that register themselves, with a key that opens nothing else",
      "    KVGATE_METRICS_KEY: GET /metrics for a scraper that should not hold the admin key",
      "",
    ]);
    // A group with no deployments: its servers register themselves, with the register key, and may
    // be sent the secrets the config lets their heartbeats name.
    const selfRegistered = { auth: { registrationSecrets: ["VLLM_KEY"] }, modelGroups: [{ name: "m", pricing }] };
    expect(await secretsOf("secrets-self-registered.json", selfRegistered)).toEqual([
      "  secrets it reads: KVGATE_MASTER_KEY, KVGATE_REGISTER_KEY, VLLM_KEY",
      "  optional secrets, each turning on what it names (unset, it stays off):",
      "    KVGATE_ADMIN_KEY: the admin API, npx kvgate and GET /metrics",
      "    KVGATE_METRICS_KEY: GET /metrics for a scraper that should not hold the admin key",
      "",
    ]);
    // A group with no deployments that refuses every heartbeat (registration false): only the admin API can give it a server.
    expect(await secretsOf("secrets-registration-false.json", { modelGroups: [{ name: "tenant-a", pricing, registration: false }] })).toEqual([
      "  secrets it reads: KVGATE_MASTER_KEY, KVGATE_ADMIN_KEY",
      "  optional secrets, each turning on what it names (unset, it stays off):",
      "    KVGATE_REGISTER_KEY: heartbeats of GPU servers that register themselves, with a key that opens nothing else",
      "    KVGATE_METRICS_KEY: GET /metrics for a scraper that should not hold the admin key",
      "",
    ]);
    // Servers the config names: the register key is optional, and so are the secrets only its heartbeats read.
    const deployments = [{ id: "a", baseUrl: "https://gpu.example.com", model: "m", apiKeyEnv: "VLLM_KEY" }];
    const seeded = { auth: { registrationSecrets: ["VLLM_KEY", "EDGE_KEY"] }, modelGroups: [{ name: "m", pricing, deployments }] };
    expect(await secretsOf("secrets-registration-optional.json", seeded)).toEqual([
      "  secrets it reads: KVGATE_MASTER_KEY, VLLM_KEY",
      "  optional secrets, each turning on what it names (unset, it stays off):",
      "    KVGATE_ADMIN_KEY: the admin API, npx kvgate and GET /metrics",
      "    KVGATE_REGISTER_KEY: heartbeats of GPU servers that register themselves, with a key that opens nothing else",
      "    EDGE_KEY: for servers that register themselves and name it (auth.registrationSecrets), with KVGATE_REGISTER_KEY",
      "    KVGATE_METRICS_KEY: GET /metrics for a scraper that should not hold the admin key",
      "",
    ]);
  });

  it("takes the README's config example as it is written, comments and all", async () => {
    const readme = await readFile(join(ROOT, "README.md"), "utf8");
    const example = /```jsonc\n([\s\S]*?)```/.exec(readme)?.[1];
    expect(example).toContain("//");
    const r = await check([await file("readme-example.jsonc", example as string)]);
    expect(r.stderr).toBe("");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/: ok — llama-3\.1-8b \(prefix-aware, 1 deployment\(s\)\)\n/);
    expect(r.stdout).toContain("secrets it reads: KVGATE_MASTER_KEY");
  });

  it("takes every config and deployment the README's Config and Deploy sections show, as written (a deployment in a group of its own)", async () => {
    const readme = await readFile(join(ROOT, "README.md"), "utf8");
    const section = (title: string): string => {
      const from = readme.indexOf(`\n## ${title}\n`);
      expect(from, title).toBeGreaterThan(0);
      const to = readme.indexOf("\n## ", from + 1);
      return readme.slice(from, to < 0 ? undefined : to);
    };
    const blocks = ["Config", "Deploy"].flatMap((title) => [...section(title).matchAll(/```jsonc?\n([\s\S]*?)```/g)].map((m) => m[1] as string));
    // The Config example and the Private networks deployment, at least.
    expect(blocks.length).toBeGreaterThanOrEqual(2);
    for (const [i, block] of blocks.entries()) {
      // A block that starts with a deployment's field is one deployment: checked in a group of one.
      const text = /^\{\s*"(id|baseUrl)"/.test(block) ? `{ "modelGroups": [{ "name": "readme", "deployments": [\n${block}] }] }` : block;
      const r = await check([await file(`readme-block-${i}.jsonc`, text)]);
      expect(r.stderr, block).toBe("");
      expect(r.code).toBe(0);
    }
  });

  it("reads wrangler.toml's dev config as wrangler dev (npm start) does, whatever TOML string holds it, and tells a TOML table as the Worker does", async () => {
    const project = join(dir, "project");
    await mkdir(project, { recursive: true });
    const toml = (vars: string) => writeFile(join(project, "wrangler.toml"), `name = "kvgate-dev"\nmain = "workers/gateway/index.ts"\ncompatibility_date = "2026-10-20"\n\n[vars]\n${vars}\n`);
    const devCheck = () => runScript("scripts/check-config.ts", [], {}, project);
    const config = '{"modelGroups": [{"name": "one-line", "deployments": [{"baseUrl": "http://127.0.0.1:9001", "model": "m"}]}]}';
    for (const quoted of [`'${config}'`, `"""\n${config}\n"""`]) {
      await toml(`KVGATE_CONFIG = ${quoted}`);
      const r = await devCheck();
      expect(r.stderr, quoted).toBe("");
      expect(r.stdout).toMatch(/^wrangler\.toml \[vars\] KVGATE_CONFIG: ok — one-line \(prefix-aware, 1 deployment\(s\)\)\n/);
    }
    await toml(`[vars.KVGATE_CONFIG]\nmodelGroups = []`);
    const table = await devCheck();
    expect(table.code).toBe(1);
    expect(table.stderr).toBe("check-config: wrangler.toml [vars] KVGATE_CONFIG is a TOML table: give it as one JSON string under [vars], KVGATE_CONFIG = '''{ … }'''; or name a config file\n");
  });

  it("says a config with no model groups is ok in a whole line, naming where the fleet then comes from", async () => {
    const r = await check([], { KVGATE_CONFIG: '{ "cors": { "allowedOrigins": ["https://app.example.com"] } }' });
    expect(r.code).toBe(0);
    expect(r.stdout.split("\n")[0]).toBe("$KVGATE_CONFIG: ok — no model groups (the admin API seeds the fleet: npx kvgate fleet apply --file fleet.json)");
  });

  it("reads $KVGATE_CONFIG, refuses to guess between it and a file, and checks the dev config when given neither", async () => {
    const fromEnv = await check([], { KVGATE_CONFIG: '{"modelGroups":[{"name":"a","deployments":[{"baseUrl":"https://gpu.example","model":"m"}]}]}' });
    expect(fromEnv.code).toBe(0);
    expect(fromEnv.stdout).toMatch(/^\$KVGATE_CONFIG: ok — a \(prefix-aware, 1 deployment\(s\)\)\n/);
    const both = await check([], { KVGATE_CONFIG: "{}", KVGATE_CONFIG_FILE: join(dir, "x.json") });
    expect(both.code).toBe(1);
    expect(both.stderr).toBe("check-config: KVGATE_CONFIG_FILE and KVGATE_CONFIG are both set: unset one, so that it is clear which config is meant\n");
    const dev = await check([]);
    expect(dev.code).toBe(0);
    expect(dev.stdout).toMatch(/^wrangler\.toml \[vars\] KVGATE_CONFIG: ok — kvgate-sim/);
  });
});
