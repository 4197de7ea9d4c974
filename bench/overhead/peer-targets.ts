/**
 * The peer gateways as benchmark targets, measured only when installed
 * (`npx node bench/peers/install.ts`); a missing one is skipped with a note, never estimated.
 */
import { availableParallelism, tmpdir } from "node:os";
import { join } from "node:path";
import { litellmInstalled, startLitellm } from "../peers/litellm.ts";
import { portkeyInstalled, startPortkey, type PeerServer } from "../peers/portkey.ts";
import { SIM_MODEL, type Target, type TargetName } from "./targets.ts";

export type PeerStart = { ok: true; target: Target } | { ok: false; note: string };

export interface PeerTarget {
  label: string;
  /**
   * Measured in turns with the Workers targets, as they are with one another: one process, idle
   * while the others are measured, so its ratio to kvgate compares windows minutes apart at most,
   * not a run's first half with its second on a machine that drifts. LiteLLM's workers are a
   * fleet of Python processes each: measured alone, after.
   */
  inTurns: boolean;
  start(upstream: string, log: (line: string) => void): Promise<PeerStart>;
}

function asTarget(name: TargetName, label: string, s: PeerServer, workers?: number): Target {
  return { name, label, url: s.url, model: SIM_MODEL, headers: s.headers, status: null, version: s.version, ...(workers === undefined ? {} : { workers }), stop: s.stop };
}

async function attempt(label: string, installed: boolean, start: () => Promise<Target>, log: (l: string) => void): Promise<PeerStart> {
  if (!installed) return { ok: false, note: `${label}: not installed, skipped (install: npx node bench/peers/install.ts)` };
  log(`starting ${label}`);
  try {
    return { ok: true, target: await start() };
  } catch (e) {
    return { ok: false, note: `${label}: failed to start, skipped: ${(e as Error).message}` };
  }
}

/** Peer logs go to files, not pipes: an undrained pipe would stall a busy peer. */
const logFile = (label: string): string => join(tmpdir(), `kvgate-bench-${label}.log`);

/** `quick` keeps LiteLLM to one worker: a second start costs ~30 s of the 3-minute budget. */
export function peerTargets(wanted: readonly TargetName[], quick: boolean): PeerTarget[] {
  const peers: PeerTarget[] = [];
  if (wanted.includes("portkey")) {
    peers.push({
      label: "portkey",
      inTurns: true,
      start: (upstream, log) => attempt("portkey", portkeyInstalled(), async () => asTarget("portkey", "portkey", await startPortkey(upstream, logFile("portkey"))), log),
    });
  }
  if (wanted.includes("litellm")) {
    // One worker (its default), then one per core, as LiteLLM's own docs recommend.
    for (const workers of quick ? [1] : [...new Set([1, availableParallelism()])]) {
      const label = `litellm-${workers}w`;
      peers.push({
        label,
        inTurns: false,
        start: (upstream, log) =>
          attempt(label, litellmInstalled(), async () => asTarget("litellm", label, await startLitellm({ upstream, model: SIM_MODEL, workers, logFile: logFile(label) }), workers), log),
      });
    }
  }
  return peers;
}
