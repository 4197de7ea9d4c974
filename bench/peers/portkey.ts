/**
 * The Portkey AI gateway (npm @portkey-ai/gateway, installed in bench/.peers/ by
 * bench/peers/install.ts) in a process of its own, bound to 127.0.0.1, routed to one
 * OpenAI-compatible upstream by its request headers.
 */
import { spawn } from "node:child_process";
import { existsSync, openSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { freePort, listensOnlyOnLoopback, stopGroup, waitForHttp } from "./process-utils.ts";
import { PEERS_DIR, PORTKEY_VERSION } from "./versions.ts";

const SERVER = join(PEERS_DIR, "node_modules", "@portkey-ai", "gateway", "build", "start-server.js");
const LOOPBACK_PRELOAD = fileURLToPath(new URL("./portkey-loopback.ts", import.meta.url));

export interface PeerServer {
  url: string;
  /** Headers every request needs (routing, auth). */
  headers: Record<string, string>;
  version: string;
  stop(): Promise<void>;
}

export function portkeyInstalled(): boolean {
  return existsSync(SERVER);
}

export async function startPortkey(upstream: string, logFile: string): Promise<PeerServer> {
  const port = await freePort();
  const out = openSync(logFile, "a");
  // Its own process group, so stopping it ends everything it started and nothing else.
  const child = spawn(process.execPath, ["--import", LOOPBACK_PRELOAD, SERVER, `--port=${port}`, "--headless"], {
    cwd: PEERS_DIR,
    detached: true,
    stdio: ["ignore", out, out],
    env: { ...process.env, NODE_ENV: "production" },
  });
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitForHttp(`${url}/`, child, 30_000);
    if (!listensOnlyOnLoopback(port)) throw new Error(`Portkey listens beyond 127.0.0.1 on port ${port}; stopped it`);
  } catch (e) {
    await stopGroup(child);
    throw e;
  }
  return {
    url,
    headers: { "x-portkey-provider": "openai", "x-portkey-custom-host": `${upstream}/v1`, authorization: "Bearer sk-simulated-fleet" },
    version: PORTKEY_VERSION,
    stop: () => stopGroup(child),
  };
}
