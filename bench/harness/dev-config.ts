/**
 * The dev config as wrangler.toml ships it: `[vars] KVGATE_CONFIG`, read with wrangler's own
 * parser and nothing merged in (no .dev.vars, no --var), so `npm start` and the tests that stand
 * for it follow the file.
 */
import { join, resolve } from "node:path";
import { unstable_readConfig } from "wrangler";
import { parseJsonc } from "../../src/config/jsonc.ts";
import { parseConfig, TOML_TABLE } from "../../src/config/load.ts";
import { GatewayConfigSchema, type GatewayConfig } from "../../src/config/schema.ts";

const ROOT = resolve(import.meta.dirname, "..", "..");

/**
 * The text wrangler dev hands the dev Worker as KVGATE_CONFIG, read as it reads it (any TOML
 * string); throws, saying why, when there is none. `npm run check-config` with no config named
 * checks this, so that it and `npm start` read one file one way.
 */
export function wranglerDevConfigText(root: string = ROOT): string {
  const text: unknown = unstable_readConfig({ config: join(root, "wrangler.toml") }, { hideWarnings: true }).vars.KVGATE_CONFIG;
  if (typeof text === "object" && text !== null) throw new Error(`wrangler.toml [vars] KVGATE_CONFIG ${TOML_TABLE}`);
  if (typeof text !== "string") throw new Error("wrangler.toml has no [vars] KVGATE_CONFIG string");
  return text;
}

/** Throws, with the gateway's own message, if the config is one the gateway would refuse. */
export function wranglerDevConfig(root: string = ROOT): GatewayConfig {
  const text = wranglerDevConfigText(root);
  const checked = parseConfig(text);
  if (!checked.ok) throw new Error(`wrangler.toml [vars] KVGATE_CONFIG: ${checked.error}`);
  // JSON with comments and trailing commas, as the gateway reads it.
  const json = parseJsonc(text);
  if (!json.ok) throw new Error(`wrangler.toml [vars] KVGATE_CONFIG: ${json.error}`);
  return GatewayConfigSchema.parse(json.value);
}

/**
 * The config with every deployment on `from[i]` moved to `to[i]`: the dev config names npm
 * start's default fleet ports, and a fleet started elsewhere (a test's, a second copy's) has
 * others. Deployments on other URLs stay where they are.
 */
export function moveFleet(config: GatewayConfig, from: readonly string[], to: readonly string[]): GatewayConfig {
  const moved = (baseUrl: string): string => {
    const i = from.indexOf(baseUrl.replace(/\/+$/, ""));
    return i >= 0 ? (to[i] ?? baseUrl) : baseUrl;
  };
  return {
    ...config,
    modelGroups: config.modelGroups.map((g) => ({ ...g, deployments: g.deployments.map((d) => ({ ...d, baseUrl: moved(d.baseUrl) })) })),
  };
}
