import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { moveFleet, wranglerDevConfig } from "../../bench/harness/dev-config.ts";
import { apiKeyLine, newApiKey, readApiKey } from "../../bench/start/api-key.ts";
import { curlExample, readyBanner } from "../../bench/start/banner.ts";
import { DEFAULT_FLEET_PORT, DEFAULT_PORT, HOST, MODEL, fleetUrls, startOptions } from "../../bench/start/options.ts";
import { wranglerDevArgs } from "../../bench/start/wrangler-dev.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");
const DEFAULT_URL = `http://${HOST}:${DEFAULT_PORT}`;

describe("npm start's key", () => {
  it("is new each run and long enough not to guess", () => {
    const a = newApiKey();
    expect(a).toMatch(/^sk-kvgate-dev-[0-9a-f]{48}$/);
    expect(newApiKey()).not.toBe(a);
  });

  it("is printed once, on a line of its own, and read back from there", () => {
    const key = newApiKey();
    const text = readyBanner({ url: DEFAULT_URL, model: MODEL, workers: 4, key });
    expect(text.split("\n")).toContain(`KVGATE_API_KEY=${key}`);
    expect(text.split(key).length - 1).toBe(1);
    expect(readApiKey(`wrangler noise\n${text}\nmore noise`)).toBe(key);
  });

  it("is not read from a line that only contains the variable's name", () => {
    expect(readApiKey("export KVGATE_API_KEY=sk-x\n  KVGATE_API_KEY=sk-y")).toBeNull();
    expect(readApiKey(apiKeyLine("sk-z"))).toBe("sk-z");
  });
});

describe("the curl example", () => {
  it("takes the key from the shell, so copying it copies no key", () => {
    expect(curlExample(DEFAULT_URL, MODEL)).toContain('-H "authorization: Bearer $KVGATE_API_KEY"');
  });

  it("is the one the README shows, for the default port", async () => {
    const readme = await readFile(join(ROOT, "README.md"), "utf8");
    expect(readme).toContain(curlExample(DEFAULT_URL, MODEL));
  });
});

describe("wrangler dev's command line", () => {
  const base = { host: HOST, port: DEFAULT_PORT, masterKeyEnv: "KVGATE_MASTER_KEY", key: "sk-test", persistTo: "/tmp/state", config: null };

  it("passes the key as the config's master key var, and nowhere else", () => {
    const args = wranglerDevArgs(base);
    expect(args).toEqual(expect.arrayContaining(["--var", "KVGATE_MASTER_KEY:sk-test", "--port", "8787", "--persist-to", "/tmp/state"]));
    expect(args.filter((a) => a.includes("sk-test"))).toEqual(["KVGATE_MASTER_KEY:sk-test"]);
    expect(wranglerDevArgs({ ...base, masterKeyEnv: "DEV_KEY" })).toContain("DEV_KEY:sk-test");
  });

  it("serves wrangler.toml's config unless the fleet moved", () => {
    expect(wranglerDevArgs(base).some((a) => a.startsWith("KVGATE_CONFIG:"))).toBe(false);
    const config = moveFleet(wranglerDevConfig(), fleetUrls(DEFAULT_FLEET_PORT), fleetUrls(19001));
    const args = wranglerDevArgs({ ...base, config });
    expect(args).toContain(`KVGATE_CONFIG:${JSON.stringify(config)}`);
  });
});

describe("npm start's ports", () => {
  it("default to 8787 and 9001–9004", () => {
    expect(startOptions({})).toEqual({ port: 8787, fleetPort: 9001 });
  });

  it("move with KVGATE_PORT and KVGATE_FLEET_PORT, 0 for free ones", () => {
    expect(startOptions({ KVGATE_PORT: "0", KVGATE_FLEET_PORT: "9101" })).toEqual({ port: 0, fleetPort: 9101 });
    expect(() => startOptions({ KVGATE_PORT: "80a" })).toThrow(/KVGATE_PORT must be a port/);
    expect(() => startOptions({ KVGATE_FLEET_PORT: "70000" })).toThrow(/KVGATE_FLEET_PORT must be a port/);
  });

  it("take the config's deployments along when the fleet moves, and nothing else", () => {
    const config = wranglerDevConfig();
    const moved = moveFleet(config, fleetUrls(DEFAULT_FLEET_PORT), fleetUrls(19001));
    expect(moved.modelGroups[0]?.deployments.map((d) => d.baseUrl)).toEqual(fleetUrls(19001));
    expect({ ...moved, modelGroups: [] }).toEqual({ ...config, modelGroups: [] });
    const elsewhere = { ...config, modelGroups: config.modelGroups.map((g) => ({ ...g, deployments: g.deployments.map((d) => ({ ...d, baseUrl: "http://10.0.0.1:8000" })) })) };
    expect(moveFleet(elsewhere, fleetUrls(DEFAULT_FLEET_PORT), fleetUrls(19001))).toEqual(elsewhere);
  });
});

describe("wrangler.toml's dev config", () => {
  it("needs the key and allows no CORS origin", () => {
    const config = wranglerDevConfig();
    expect(config.auth).toEqual({ masterKeyEnv: "KVGATE_MASTER_KEY", adminKeyEnv: "KVGATE_ADMIN_KEY", registerKeyEnv: "KVGATE_REGISTER_KEY" });
    expect(config.cors.allowedOrigins).toEqual([]);
  });

  it("names the fleet npm start starts", () => {
    const named = wranglerDevConfig().modelGroups.flatMap((g) => g.deployments.map((d) => d.baseUrl));
    expect(named).toEqual(fleetUrls(DEFAULT_FLEET_PORT));
  });

  it("is refused with the gateway's reason when it still turns the removed dev mode on", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kvgate-old-toml-"));
    try {
      const toml = await readFile(join(ROOT, "wrangler.toml"), "utf8");
      await writeFile(join(dir, "wrangler.toml"), toml.replace('"modelGroups"', '"auth": { "devOpenOnLoopback": true },\n  "modelGroups"'));
      expect(() => wranglerDevConfig(dir)).toThrow(/KVGATE_CONFIG: config: auth\.devOpenOnLoopback was removed: .*npm start/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
