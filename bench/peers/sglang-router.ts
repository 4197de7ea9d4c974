/**
 * SGLang's router (PyPI sglang-router, installed in bench/.venv/ by bench/peers/install.ts), run
 * standalone in front of plain OpenAI-compatible workers: every setting at its default but the
 * policy and the addresses it listens on.
 *
 * What it needs from a worker: GET /health (registration and its health checks). It also asks
 * /server_info, /get_server_info, /model_info and /get_model_info for metadata; a 404 there
 * leaves the worker registered under model "unknown", which does not matter: outside its multi-model
 * (IGW) mode it does not route by model.
 */
import { spawn } from "node:child_process";
import { existsSync, openSync, readdirSync } from "node:fs";
import { join } from "node:path";
import type { PeerServer } from "./portkey.ts";
import { freePort, listensOnlyOnLoopback, stopGroup, waitForHttp } from "./process-utils.ts";
import { SGLANG_ROUTER_VERSION, VENV_DIR } from "./versions.ts";

export const SGLANG_POLICIES = ["cache_aware", "round_robin"] as const;
export type SglangPolicy = (typeof SGLANG_POLICIES)[number];

const PYTHON = join(VENV_DIR, "bin", "python");

/** True when the venv holds sglang-router at the pinned version (another version is not the peer measured). */
export function sglangRouterInstalled(): boolean {
  const lib = join(VENV_DIR, "lib");
  if (!existsSync(PYTHON) || !existsSync(lib)) return false;
  return readdirSync(lib).some((python) => existsSync(join(lib, python, "site-packages", `sglang_router-${SGLANG_ROUTER_VERSION}.dist-info`)));
}

/** `/readiness` answers 200 once one worker is healthy; a run waits for all of them. */
function allWorkersHealthy(workers: number): (status: number, body: string) => boolean {
  return (status, body) => {
    if (status !== 200) return false;
    try {
      return (JSON.parse(body) as { healthy_workers?: unknown }).healthy_workers === workers;
    } catch {
      return false;
    }
  };
}

export async function startSglangRouter(o: { workerUrls: readonly string[]; policy: SglangPolicy; logFile: string }): Promise<PeerServer> {
  const port = await freePort();
  const metricsPort = await freePort();
  const out = openSync(o.logFile, "a");
  const args = ["-m", "sglang_router.launch_router", "--worker-urls", ...o.workerUrls, "--policy", o.policy, "--host", "127.0.0.1", "--port", String(port)];
  // Its Prometheus exporter would listen on 0.0.0.0:29000: on this machine's loopback, on a free port.
  args.push("--prometheus-host", "127.0.0.1", "--prometheus-port", String(metricsPort));
  // Its own process group, so stopping it ends everything it started and nothing else.
  const child = spawn(PYTHON, args, { detached: true, stdio: ["ignore", out, out] });
  const url = `http://127.0.0.1:${port}`;
  try {
    // Workers register in the background after the server listens; until then it answers 503.
    await waitForHttp(`${url}/readiness`, child, 60_000, allWorkersHealthy(o.workerUrls.length));
    for (const p of [port, metricsPort]) if (!listensOnlyOnLoopback(p)) throw new Error(`sglang-router listens beyond 127.0.0.1 on port ${p}; stopped it`);
  } catch (e) {
    await stopGroup(child);
    throw e;
  }
  return { url, headers: {}, version: SGLANG_ROUTER_VERSION, stop: () => stopGroup(child) };
}
