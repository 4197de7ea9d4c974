import { cp, mkdir, readFile, symlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { unstable_readConfig } from "wrangler";
import { ROOT, runNode, runScript } from "../support/run-script.ts";
import { useTempDir } from "../support/temp-dir.ts";

// `npm run deploy` as a user runs it, with `-- --dry-run`: wrangler bundles and checks the
// production environment exactly as for an upload, and stops before it (no account needed).
const deploy = (env: Record<string, string>, args: string[] = []) => runScript("scripts/deploy.ts", args, env);

const read = (env?: string) => unstable_readConfig({ config: join(ROOT, "wrangler.toml"), ...(env ? { env } : {}) }, { hideWarnings: true });
const dev = read();
const production = read("production");
const devConfig = dev.vars.KVGATE_CONFIG as string;

const PUBLIC_CONFIG = `{
  // A production config: public GPU servers, one page allowed to call from a browser.
  "cors": { "allowedOrigins": ["https://app.example.com"] },
  "modelGroups": [
    { "name": "llama", "locationHint": "weur",
      "deployments": [{ "id": "gpu-a", "baseUrl": "https://gpu-a.example.com", "model": "meta-llama/Llama-3.1-8B-Instruct", "apiKeyEnv": "VLLM_KEY" }] },
  ],
}`;

const dir = useTempDir("kvgate-deploy-test-");

describe("wrangler.toml's production environment", () => {
  it("shares no dev setting: its own name, no vars, the same Durable Objects and migrations, Workers Logs on", () => {
    // The dev settings are there to leave out: loopback backends, the dev config itself.
    expect(devConfig).toContain("127.0.0.1");
    expect(production.name).toBe("kvgate");
    expect(production.name).not.toBe(dev.name);
    expect(production.vars).toEqual({});
    const text = JSON.stringify(production);
    for (const devOnly of ["127.0.0.1", "KVGATE_CONFIG", "KVGATE_MASTER_KEY", "sk-", '"*"']) expect(text).not.toContain(devOnly);
    // Every Durable Object of the dev Worker is bound in production too, to the same class.
    expect(production.durable_objects.bindings).toEqual(dev.durable_objects.bindings);
    expect(production.migrations).toEqual(dev.migrations);
    expect(dev.observability?.enabled).toBe(true);
    expect(production.observability?.enabled).toBe(true);
    expect([production.main, production.compatibility_date, production.compatibility_flags]).toEqual([dev.main, dev.compatibility_date, dev.compatibility_flags]);
  });
});

describe("npm run deploy", () => {
  it("names what it needs when no production config is given, and deploys nothing", async () => {
    const r = await deploy({});
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr).toBe("npm run deploy: name the production config: KVGATE_CONFIG_FILE=config.prod.json npm run deploy (or KVGATE_CONFIG='{…}')\n");
  });

  it("refuses the dev config: a deployed Worker cannot reach its loopback backends", async () => {
    const r = await deploy({ KVGATE_CONFIG: devConfig });
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    const lines = r.stderr.trim().split("\n");
    expect(lines[0]).toBe("$KVGATE_CONFIG: 4 problems");
    expect(lines.slice(1)).toEqual([0, 1, 2, 3].map((i) => expect.stringMatching(new RegExp(`^  modelGroups\\[0\\]\\.deployments\\[${i}\\]\\.baseUrl http://127\\.0\\.0\\.1:900${i + 1} is a loopback address`))));
  });

  it("refuses, without a binding, every name and address only a private network resolves or routes, and takes public ones", async () => {
    const refused = [
      ["http://vllm:8000", "a single-label name (a Docker or LAN host's)"],
      ["http://gpu.local:8000", "a private network's name (.local)"],
      ["http://gpu-a.internal:8000", "a private network's name (.internal)"],
      ["http://nas.home.arpa:8000", "a private network's name (.home.arpa)"],
      ["http://localhost.:8000", "a loopback address"],
      ["http://169.254.10.1:8000", "a link-local address"],
      ["http://100.64.0.7:8000", "a carrier-grade NAT address (100.64.0.0/10, Tailscale's too)"],
      ["http://[fe80::1]:8000", "a link-local address"],
      ["http://[::ffff:192.168.1.5]:8000", "a private address"],
      ["http://[::ffff:127.0.0.1]:8000", "a loopback address"],
      ["http://[64:ff9b::a00:5]:8000", "a private address"],
      ["http://[2002:a9fe:a9fe::]:8000", "a link-local address"],
      ["http://[64:ff9b:1::a00:5]:8000", "a local-use NAT64 address (64:ff9b:1::/48)"],
    ];
    // A reserved name (.example) is the operator's to judge: only a tenant's media URL is held to public top-level domains.
    const taken = ["https://gpu.example.com", "https://gpu.example", "http://100.128.0.1:8000", "http://172.32.0.1:8000", "http://[2606:4700::1111]:8000"];
    const deployments = [...refused.map(([baseUrl]) => baseUrl), ...taken].map((baseUrl, i) => ({ id: `d${i}`, baseUrl, model: "m" }));
    // --dry-run: were the config taken, nothing would be uploaded.
    const r = await deploy({ KVGATE_CONFIG: JSON.stringify({ modelGroups: [{ name: "a", deployments }] }) }, ["--dry-run", "--outdir", join(dir(), "not-refused")]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr.trim().split("\n")).toEqual([
      `$KVGATE_CONFIG: ${refused.length} problems`,
      ...refused.map(([url, what], i) => `  modelGroups[0].deployments[${i}].baseUrl ${url} is ${what}, which a Worker on Cloudflare cannot reach (reach it through a Workers VPC binding: README, "Private networks")`),
    ]);
  });

  it("refuses a public http:// server that would be sent a secret in cleartext, and takes one sent none", async () => {
    const deployments = [
      { id: "keyed", baseUrl: "http://203.0.113.5:8000", model: "m", apiKeyEnv: "VLLM_KEY" },
      { id: "access", baseUrl: "http://gpu.example.com", model: "m", headersFromEnv: { "CF-Access-Client-Secret": "ACCESS_CLIENT_SECRET" } },
      { id: "open", baseUrl: "http://203.0.113.6:8000", model: "m" },
      { id: "tls", baseUrl: "https://203.0.113.7:8000", model: "m", apiKeyEnv: "VLLM_KEY" },
    ];
    const r = await deploy({ KVGATE_CONFIG: JSON.stringify({ modelGroups: [{ name: "a", deployments }] }) }, ["--dry-run", "--outdir", join(dir(), "not-refused")]);
    expect(r.code).toBe(1);
    expect(r.stderr.trim().split("\n")).toEqual([
      "$KVGATE_CONFIG: 2 problems",
      "  modelGroups[0].deployments[0].baseUrl http://203.0.113.5:8000 is plain http, and the deployment's apiKeyEnv would cross the internet in cleartext, with every prompt (use https, or reach it through a Workers VPC binding: README, \"Private networks\")",
      "  modelGroups[0].deployments[1].baseUrl http://gpu.example.com is plain http, and the deployment's headersFromEnv would cross the internet in cleartext, with every prompt (use https, or reach it through a Workers VPC binding: README, \"Private networks\")",
    ]);
  });

  it("refuses a config whose problems the Worker would find, all of them, and a binding production does not have", async () => {
    const bad = await deploy({ KVGATE_CONFIG: '{"modelGroups":[{"name":"a","locationHint":"mars","deployments":[{"baseUrl":"https://gpu.example","model":"m","headersFromEnv":{"Host":"H"}}]}]}' });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toContain("$KVGATE_CONFIG: 2 problems\n");
    expect(bad.stderr).toContain("modelGroups[0].locationHint must be one of");
    expect(bad.stderr).toContain("modelGroups[0].deployments[0].headersFromEnv.Host is a header the gateway sets itself");
    const unbound = await deploy({ KVGATE_CONFIG: '{"modelGroups":[{"name":"a","deployments":[{"baseUrl":"http://10.0.0.7:8000","model":"m","binding":"GPU_VPC"}]}]}' });
    expect(unbound.code).toBe(1);
    expect(unbound.stderr).toBe(`$KVGATE_CONFIG: modelGroups[0].deployments[0].binding "GPU_VPC" is not bound in wrangler.toml's [env.production] (add it to vpc_services or vpc_networks there)\n`);
    // A self-registered server's binding: its heartbeats would be refused after a deploy that said ok.
    const unlisted = await deploy({ KVGATE_CONFIG: '{"modelGroups":[{"name":"a","registrationBindings":["GPU_VPC"],"deployments":[]}]}' });
    expect(unlisted.code).toBe(1);
    expect(unlisted.stderr).toBe(`$KVGATE_CONFIG: modelGroups[0].registrationBindings[0] "GPU_VPC" is not bound in wrangler.toml's [env.production] (add it to vpc_services or vpc_networks there)\n`);
  });

  it("refuses a config too big for the secret that carries it", async () => {
    const deployments = Array.from({ length: 60 }, (_, i) => ({ id: `gpu-${i}`, baseUrl: `https://gpu-${i}.inference.example.com`, model: "meta-llama/Llama-3.1-8B-Instruct" }));
    const r = await deploy({ KVGATE_CONFIG: JSON.stringify({ modelGroups: [{ name: "big", deployments }] }) });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/^\$KVGATE_CONFIG: the config is \d+ bytes as JSON, and a Worker secret holds at most 5120\n$/);
  });

  /**
   * `npm run deploy -- --dry-run` beside wrangler.toml as `edit` makes it: deploy.ts reads the
   * wrangler.toml beside its own folder, so a copy of the scripts stands beside the edited one.
   */
  const deployEdited = async (name: string, edit: (toml: string) => string) => {
    const project = join(dir(), name);
    await mkdir(project);
    await cp(join(ROOT, "scripts"), join(project, "scripts"), { recursive: true });
    for (const shared of ["src", "node_modules"]) await symlink(join(ROOT, shared), join(project, shared));
    const toml = await readFile(join(ROOT, "wrangler.toml"), "utf8");
    const edited = edit(toml);
    expect(edited).not.toBe(toml);
    await writeFile(join(project, "wrangler.toml"), edited);
    const config = JSON.stringify({ modelGroups: [{ name: "a", deployments: [{ id: "gpu-a", baseUrl: "https://gpu-a.example.com", model: "m" }] }] });
    const r = await runNode([join(project, "scripts", "deploy.ts"), "--dry-run", "--outdir", join(project, "not-bundled")], { KVGATE_CONFIG: config }, project);
    return { code: r.code, stdout: r.stdout, stderr: r.stderr.trim().split("\n") };
  };

  it("says what wrangler finds wrong in an edited wrangler.toml in its own lines, with no stack, and deploys nothing", async () => {
    // The README's vpc_networks line uncommented without its tunnel_id.
    const r = await deployEdited("edited-toml", (toml) => toml.replace('# vpc_networks = [{ binding = "GPU_VPC", tunnel_id = "<tunnel id>" }]', 'vpc_networks = [{ binding = "GPU_VPC" }]'));
    expect(r).toEqual({
      code: 1,
      stdout: "",
      stderr: [
        "npm run deploy: wrangler.toml: Processing wrangler.toml configuration:",
        '  - "env.production" environment configuration',
        '    - "env.production.vpc_networks[0]" bindings must have either a "tunnel_id" or "network_id" field but got {"binding":"GPU_VPC"}.',
      ],
    });
  });

  it("names the line of a TOML typo in wrangler.toml, which wrangler's message leaves out", async () => {
    const r = await deployEdited("toml-typo", (toml) => toml.replace(/^name = /m, "name == "));
    const line = (await readFile(join(ROOT, "wrangler.toml"), "utf8")).split("\n").findIndex((l) => l.startsWith("name = ")) + 1;
    expect(r.code).toBe(1);
    expect(r.stdout).toBe("");
    expect(r.stderr[0]).toMatch(new RegExp(`^npm run deploy: wrangler\\.toml:${line}: Invalid TOML document: `));
    expect(r.stderr[1]).toMatch(/^ {2}name == "/);
    expect(r.stderr).toHaveLength(2);
  });

  it("checks a production config, then bundles [env.production] with that config as its secret and nothing of dev", async () => {
    const path = join(dir(), "config.prod.jsonc");
    await writeFile(path, PUBLIC_CONFIG);
    const out = join(dir(), "bundle");
    const r = await deploy({ KVGATE_CONFIG_FILE: path }, ["--dry-run", "--outdir", out]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`${path}: ok — llama (prefix-aware, 1 deployment(s))`);
    expect(r.stdout).toContain("secrets it reads (each once: npx wrangler secret put NAME --env production): KVGATE_MASTER_KEY, VLLM_KEY\n  optional secrets, each turning on what it names (unset, it stays off):\n    KVGATE_ADMIN_KEY: ");
    // wrangler's table of what the Worker gets: the object, and the config as a hidden secret, no var.
    const bindings = r.stdout.slice(r.stdout.indexOf("Your Worker has access to the following bindings:"), r.stdout.indexOf("--dry-run: exiting now."));
    const rows = bindings.split("\n").filter((l) => l.startsWith("env."));
    const objects = dev.durable_objects.bindings.map((b: { name: string; class_name: string }) => `env.${b.name} (${b.class_name}) Durable Object`);
    expect(rows.map((l) => l.replace(/\s+/g, " ").trim())).toEqual([...objects, 'env.KVGATE_CONFIG ("(hidden)") Environment Variable']);
    const bundle = await readFile(join(out, "index.js"), "utf8");
    for (const devOnly of ["127.0.0.1:900", "kvgate-sim", "sk-kvgate-dev"]) expect(bundle).not.toContain(devOnly);
  });
});
