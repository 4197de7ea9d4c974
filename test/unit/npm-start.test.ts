import { existsSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { describe, expect, it } from "vitest";
import { moveFleet, wranglerDevConfig } from "../../bench/harness/dev-config.ts";
import { keyLine, newDevKeys, readKey } from "../../bench/start/api-key.ts";
import { curlExample, readyBanner } from "../../bench/start/banner.ts";
import { DEFAULT_FLEET_PORT, DEFAULT_PORT, HOST, MODEL, fleetUrls, startOptions, startUsage } from "../../bench/start/options.ts";
import { portRefusal } from "../../bench/start/port-taken.ts";
import { keysEnvText, writeKeysFile } from "../../bench/start/keys-file.ts";
import { WRANGLER_ENV_FILE_SETTINGS, readWranglerDevArgs, wranglerDevArgs } from "../../bench/start/wrangler-dev.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");
const DEFAULT_URL = `http://${HOST}:${DEFAULT_PORT}`;

describe("npm start's keys", () => {
  it("are new each run, three different ones, long enough not to guess", () => {
    const a = newDevKeys();
    for (const key of Object.values(a)) expect(key).toMatch(/^sk-kvgate-dev-[0-9a-f]{48}$/);
    expect(new Set(Object.values(a)).size).toBe(3);
    expect(newDevKeys().api).not.toBe(a.api);
  });

  it("are printed once each, on a line of their own, and read back from there", () => {
    const keys = newDevKeys();
    const text = readyBanner({ url: DEFAULT_URL, model: MODEL, workers: 4, keys });
    const lines = text.split("\n");
    expect(lines).toContain(`KVGATE_API_KEY=${keys.api}`);
    expect(lines).toContain(`KVGATE_ADMIN_KEY=${keys.admin}`);
    expect(lines).toContain(`KVGATE_REGISTER_KEY=${keys.register}`);
    for (const key of Object.values(keys)) expect(text.split(key).length - 1).toBe(1);
    expect(readKey(`wrangler noise\n${text}\nmore noise`, "api")).toBe(keys.api);
    expect(readKey(text, "admin")).toBe(keys.admin);
    expect(readKey(text, "register")).toBe(keys.register);
  });

  it("tell npx kvgate where the gateway is when it is not where npx kvgate looks by default", () => {
    const keys = newDevKeys();
    expect(readyBanner({ url: DEFAULT_URL, model: MODEL, workers: 4, keys })).not.toContain("KVGATE_URL");
    const moved = readyBanner({ url: `http://${HOST}:9000`, model: MODEL, workers: 4, keys }).split("\n");
    expect(moved).toContain(`KVGATE_URL=http://${HOST}:9000`);
  });

  it("are not read from a line that only contains the variable's name", () => {
    expect(readKey("export KVGATE_API_KEY=sk-x\n  KVGATE_API_KEY=sk-y", "api")).toBeNull();
    expect(readKey(keyLine("api", "sk-z"), "api")).toBe("sk-z");
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

describe("the gateway's command line", () => {
  const base = { host: HOST, port: DEFAULT_PORT, envFile: "/tmp/kvgate-dev-keys-x/keys.env", persistTo: "/tmp/state", config: null };

  it("holds no key: any local user can read a command line (ps, /proc/PID/cmdline); it names the keys' file", () => {
    const args = wranglerDevArgs(base);
    expect(args).toEqual(expect.arrayContaining(["--port", "8787", "--persist-to", "/tmp/state"]));
    expect(args[args.indexOf("--env-file") + 1]).toBe("/tmp/kvgate-dev-keys-x/keys.env");
    expect(args.join(" ")).not.toMatch(/sk-|KVGATE_MASTER_KEY|KVGATE_ADMIN_KEY|KVGATE_REGISTER_KEY/);
  });

  it("serves wrangler.toml's config unless the fleet moved", () => {
    expect(wranglerDevArgs(base)).not.toContain("--config");
    expect(readWranglerDevArgs(wranglerDevArgs(base))).toEqual(base);
    const config = moveFleet(wranglerDevConfig(), fleetUrls(DEFAULT_FLEET_PORT), fleetUrls(19001));
    expect(readWranglerDevArgs(wranglerDevArgs({ ...base, config }))).toEqual({ ...base, config });
  });

  it("has wrangler read the keys' file whatever the shell says, and add nothing else of the shell to the Worker", () => {
    expect(WRANGLER_ENV_FILE_SETTINGS).toEqual({ CLOUDFLARE_LOAD_DEV_VARS_FROM_DOT_ENV: "true", CLOUDFLARE_INCLUDE_PROCESS_ENV: "false" });
  });
});

describe("npm start's keys file", () => {
  const keys = { api: "sk-test", admin: "sk-admin", register: "sk-register" };
  const auth = { masterKeyEnv: "KVGATE_MASTER_KEY", adminKeyEnv: "KVGATE_ADMIN_KEY", registerKeyEnv: "KVGATE_REGISTER_KEY" };

  it("gives the client, admin and register keys as the config's master, admin and register key vars", () => {
    expect(keysEnvText(auth, keys)).toBe("KVGATE_MASTER_KEY=sk-test\nKVGATE_ADMIN_KEY=sk-admin\nKVGATE_REGISTER_KEY=sk-register\n");
    // A config that names its own: the Worker reads the keys there (npm start still prints them as KVGATE_ADMIN_KEY=…).
    expect(keysEnvText({ masterKeyEnv: "DEV_KEY", adminKeyEnv: "OPS_KEY", registerKeyEnv: "GPU_JOIN_KEY" }, keys)).toBe("DEV_KEY=sk-test\nOPS_KEY=sk-admin\nGPU_JOIN_KEY=sk-register\n");
  });

  it("is readable by this user only, in a folder of its own, and gone once removed", async () => {
    const file = await writeKeysFile(auth, newDevKeys());
    try {
      expect((await stat(file.path)).mode & 0o777).toBe(0o600);
      expect((await stat(dirname(file.path))).mode & 0o777).toBe(0o700);
      expect(await readdir(dirname(file.path))).toEqual(["keys.env"]);
    } finally {
      file.remove();
    }
    expect(existsSync(dirname(file.path))).toBe(false);
    file.remove();
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

  it("move with --port and --fleet-port, which win over PORT and the KVGATE_ variables", () => {
    expect(startOptions({}, ["--port", "9000"])).toEqual({ port: 9000, fleetPort: 9001 });
    expect(startOptions({}, ["--port=9000", "--fleet-port=19001"])).toEqual({ port: 9000, fleetPort: 19001 });
    expect(startOptions({ PORT: "9100" })).toEqual({ port: 9100, fleetPort: 9001 });
    expect(startOptions({ PORT: "9100", KVGATE_PORT: "9200" })).toEqual({ port: 9200, fleetPort: 9001 });
    expect(startOptions({ PORT: "9100", KVGATE_PORT: "9200", KVGATE_FLEET_PORT: "0" }, ["--port", "0", "--fleet-port", "19001"])).toEqual({ port: 0, fleetPort: 19001 });
    expect(startOptions({ PORT: "" })).toEqual({ port: 8787, fleetPort: 9001 });
  });

  it("refuse, in one line, what is not a port, a flag they do not know, and ports the fleet would take", () => {
    const refusal = (env: Record<string, string>, argv: string[]): string => {
      try {
        startOptions(env, argv);
      } catch (e) {
        return (e as Error).message;
      }
      throw new Error("accepted");
    };
    expect(refusal({}, ["--port", "abc"])).toBe('--port must be a port (0–65535, 0 for a free one), not "abc"');
    expect(refusal({ PORT: "0x50" }, [])).toBe('PORT must be a port (0–65535, 0 for a free one), not "0x50"');
    expect(refusal({}, ["--port", "-1"])).toMatch(/^--port must be a port/);
    expect(refusal({}, ["--port"])).toBe("--port needs a value");
    expect(refusal({}, ["--prot", "9000"])).toMatch(/^unknown argument --prot \(npm start -- --help lists the flags/);
    expect(refusal({}, ["9000"])).toMatch(/^unknown argument 9000 .*npm needs the -- before them/);
    expect(refusal({}, ["--fleet-port", "65534"])).toBe("the fleet's first port must leave room for its 4 workers: at most 65532, not 65534");
    expect(refusal({}, ["--port", "9003"])).toBe("port 9003 is one of the fleet's (9001–9004); pick another with --port or --fleet-port");
    for (const message of ["--port abc", "--port 9003"].map((a) => refusal({}, a.split(" ")))) expect(message).not.toContain("\n");
  });

  it("refuse, in one line, a port browsers and fetch will not connect to: the gateway would answer curl, yet not npm start's own check", () => {
    const reason = 'port 6000 is one that browsers and fetch refuse to connect to (the Fetch standard\'s "bad ports"); pick another with --port or PORT';
    expect(() => startOptions({}, ["--port", "6000"])).toThrow(reason);
    expect(() => startOptions({ PORT: "6000" })).toThrow(reason);
    expect(() => startOptions({ KVGATE_PORT: "10080" })).toThrow(/^port 10080 is one that browsers and fetch refuse/);
    expect(startOptions({}, ["--port", "6001"])).toEqual({ port: 6001, fleetPort: 9001 });
  });

  it("are named in the usage, with their variables and defaults", () => {
    const usage = startUsage();
    for (const word of ["npm start -- [--port N] [--fleet-port N]", "PORT", "KVGATE_FLEET_PORT", "8787", "9001–9004", "--help"]) expect(usage).toContain(word);
  });

  it("that are taken are said in one line naming the port and how to pick another", () => {
    const inUse = Object.assign(new Error("listen EADDRINUSE: address already in use 127.0.0.1:8787"), { code: "EADDRINUSE", port: 8787 });
    expect(portRefusal(inUse, 8787, { gateway: true })).toBe("port 8787 is already in use; pick another with --port or PORT");
    const second = Object.assign(new Error("listen EADDRINUSE"), { code: "EADDRINUSE", port: 9002 });
    expect(portRefusal(second, 9001, { gateway: false, fleetPort: 9001 })).toBe(
      "port 9002 is already in use (the simulated fleet takes 9001–9004); pick others with --fleet-port or KVGATE_FLEET_PORT",
    );
    const denied = Object.assign(new Error("listen EACCES"), { code: "EACCES", port: 80 });
    expect(portRefusal(denied, 80, { gateway: true })).toBe("port 80 needs privileges this user does not have; pick another with --port or PORT");
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
    expect(config.auth).toEqual({ masterKeyEnv: "KVGATE_MASTER_KEY", adminKeyEnv: "KVGATE_ADMIN_KEY", registerKeyEnv: "KVGATE_REGISTER_KEY", metricsKeyEnv: "KVGATE_METRICS_KEY", registrationSecrets: [] });
    expect(config.cors.allowedOrigins).toEqual([]);
  });

  it("names the fleet npm start starts", () => {
    const named = wranglerDevConfig().modelGroups.flatMap((g) => g.deployments.map((d) => d.baseUrl));
    expect(named).toEqual(fleetUrls(DEFAULT_FLEET_PORT));
  });

  it("takes comments and trailing commas, as the gateway and check-config do", async () => {
    const dir = await mkdtemp(join(tmpdir(), "kvgate-jsonc-toml-"));
    try {
      const toml = await readFile(join(ROOT, "wrangler.toml"), "utf8");
      const commented = toml.replace('"modelGroups"', '// the fleet npm start starts\n  "modelGroups"').replace(/\]\s*\}\s*\n'''/, "],\n}\n'''");
      expect(commented).toContain("],\n}\n'''");
      await writeFile(join(dir, "wrangler.toml"), commented);
      expect(wranglerDevConfig(dir).modelGroups).toEqual(wranglerDevConfig().modelGroups);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
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
