/**
 * Installs the peer gateways into git-ignored folders, at pinned versions:
 *   Portkey: npm into bench/.peers/ (with @hono/node-server held at 1.13.5 by an `overrides` entry)
 *   LiteLLM: a Python venv in bench/.venv/ (~2 minutes, ~740 MB)
 *   SGLang's router: sglang-router in the same venv (~150 MB alone: its router is one prebuilt Rust binary)
 *
 *   npx node bench/peers/install.ts [portkey] [litellm] [sglang]     (no argument: all three)
 *
 * Nothing here touches the project's own package.json or lock file.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { HONO_NODE_SERVER_VERSION, LITELLM_VERSION, PEERS_DIR, PORTKEY_VERSION, SGLANG_ROUTER_VERSION, VENV_DIR } from "./versions.ts";

function run(cmd: string, args: string[]): Promise<void> {
  console.log(`$ ${cmd} ${args.join(" ")}`);
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: "inherit" });
    child.once("error", reject);
    child.once("exit", (code) => (code === 0 ? resolve() : reject(new Error(`${cmd} exited with ${code}`))));
  });
}

async function installPortkey(): Promise<void> {
  await mkdir(PEERS_DIR, { recursive: true });
  // A package.json of its own, so the override applies and the project's lock stays untouched.
  const manifest = {
    name: "kvgate-bench-peers",
    private: true,
    dependencies: { "@portkey-ai/gateway": PORTKEY_VERSION, "@hono/node-server": HONO_NODE_SERVER_VERSION },
    overrides: { "@hono/node-server": HONO_NODE_SERVER_VERSION },
  };
  await writeFile(join(PEERS_DIR, "package.json"), `${JSON.stringify(manifest, null, 2)}\n`);
  await run("npm", ["install", "--prefix", PEERS_DIR, "--no-audit", "--no-fund", "--ignore-scripts"]);
}

/** The Python peers share one venv; each is one pinned requirement. */
async function pipInstall(requirement: string): Promise<void> {
  if (!existsSync(join(VENV_DIR, "bin", "python"))) await run("python3", ["-m", "venv", VENV_DIR]);
  await run(join(VENV_DIR, "bin", "pip"), ["install", "--disable-pip-version-check", "--quiet", requirement]);
}

const INSTALLS: Record<string, () => Promise<void>> = {
  portkey: installPortkey,
  litellm: () => pipInstall(`litellm[proxy]==${LITELLM_VERSION}`),
  // Its Python dependencies (fastapi, uvicorn, aiohttp, orjson, setproctitle) are unpinned: it
  // shares the venv with LiteLLM without moving any of LiteLLM's pins.
  sglang: () => pipInstall(`sglang-router==${SGLANG_ROUTER_VERSION}`),
};

const wanted = process.argv.slice(2);
for (const w of wanted) if (!(w in INSTALLS)) throw new Error(`unknown peer "${w}" (${Object.keys(INSTALLS).join(", ")})`);
for (const [name, install] of Object.entries(INSTALLS)) if (wanted.length === 0 || wanted.includes(name)) await install();
console.log("peers installed");
