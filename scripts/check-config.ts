/**
 * Validates a gateway config before a deploy, with the same parser the Worker uses.
 *   npm run check-config -- config.prod.json   a file
 *   KVGATE_CONFIG='{…}' npm run check-config     the environment
 *   npm run check-config                         the dev config in wrangler.toml
 */
import { readFileSync } from "node:fs";
import { parseConfig } from "../src/config/load.ts";

function source(): { name: string; raw: string } {
  const file = process.argv[2];
  if (file) return { name: file, raw: readFileSync(file, "utf8") };
  if (process.env.KVGATE_CONFIG) return { name: "$KVGATE_CONFIG", raw: process.env.KVGATE_CONFIG };
  const toml = readFileSync("wrangler.toml", "utf8");
  const m = /^KVGATE_CONFIG\s*=\s*'''([\s\S]*?)'''/m.exec(toml);
  if (!m) throw new Error("no KVGATE_CONFIG in wrangler.toml; pass a file");
  return { name: "wrangler.toml [vars] KVGATE_CONFIG", raw: m[1] as string };
}

const { name, raw } = source();
const result = parseConfig(raw);
if (!result.ok) {
  console.error(`${name}: ${result.error}`);
  process.exit(1);
}
const groups = result.config.groups.map((g) => `${g.name} (${g.strategy}, ${g.deployments.length} deployment(s))`);
console.log(`${name}: ok — ${groups.join(", ")}`);
