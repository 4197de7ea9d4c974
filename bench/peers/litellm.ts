/**
 * The LiteLLM proxy (PyPI litellm[proxy], in bench/.venv/ by bench/peers/install.ts) with one
 * model entry pointing at the simulated fleet, on 127.0.0.1, with a random master key.
 */
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, openSync } from "node:fs";
import { mkdtemp, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { PeerServer } from "./portkey.ts";
import { freePort, listensOnlyOnLoopback, stopGroup, waitForHttp } from "./process-utils.ts";
import { LITELLM_VERSION, VENV_DIR } from "./versions.ts";

const CLI = join(VENV_DIR, "bin", "litellm");

export function litellmInstalled(): boolean {
  return existsSync(CLI);
}

/** The key is referenced from the config, never written into it. */
function configYaml(model: string, upstream: string): string {
  return [
    "model_list:",
    `  - model_name: ${model}`,
    "    litellm_params:",
    `      model: openai/${model}`,
    `      api_base: ${upstream}/v1`,
    "      api_key: sk-simulated-fleet",
    "general_settings:",
    "  master_key: os.environ/LITELLM_MASTER_KEY",
    "",
  ].join("\n");
}

export async function startLitellm(o: { upstream: string; model: string; workers: number; logFile: string }): Promise<PeerServer> {
  const dir = await mkdtemp(join(tmpdir(), "kvgate-litellm-"));
  const config = join(dir, "config.yaml");
  await writeFile(config, configYaml(o.model, o.upstream));
  // It refuses well-known keys such as sk-1234; a fresh random one per run.
  const masterKey = `sk-${randomBytes(24).toString("hex")}`;
  const port = await freePort();
  const out = openSync(o.logFile, "a");
  const child = spawn(CLI, ["--config", config, "--host", "127.0.0.1", "--port", String(port), "--num_workers", String(o.workers)], {
    cwd: dir,
    detached: true,
    stdio: ["ignore", out, out],
    env: {
      ...process.env,
      LITELLM_MASTER_KEY: masterKey,
      // Offline: no download of the model cost map, no telemetry.
      LITELLM_LOCAL_MODEL_COST_MAP: "True",
      LITELLM_TELEMETRY: "False",
    },
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitForHttp(`${url}/health/liveliness`, child, 120_000);
    if (!listensOnlyOnLoopback(port)) throw new Error(`LiteLLM listens beyond 127.0.0.1 on port ${port}; stopped it`);
  } catch (e) {
    await stopGroup(child);
    throw e;
  }
  return { url, headers: { authorization: `Bearer ${masterKey}` }, version: LITELLM_VERSION, stop: () => stopGroup(child) };
}
