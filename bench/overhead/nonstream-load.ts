/**
 * Non-streaming load with autocannon (programmatic, bounded in time and count): `connections`
 * keep-alive clients, closed loop. Latencies and the x-kvgate-overhead-ms header are collected
 * per response here, since autocannon's own summary has no p95 and no headers.
 */
import { performance } from "node:perf_hooks";
import autocannon from "autocannon";
import type { LoadResult, RequestSpec } from "./load-types.ts";

export interface NonStreamLoadOptions extends RequestSpec {
  connections: number;
  durationMs: number;
  maxRequests: number;
}

const OVERHEAD_HEADER = "x-kvgate-overhead-ms";

/** autocannon's "headers" event carries http-parser-js's info: headers as a flat [k, v, ...] list. */
function overheadOf(info: unknown): number | null {
  const list = (info as { headers?: unknown }).headers;
  if (!Array.isArray(list)) return null;
  for (let i = 0; i + 1 < list.length; i += 2) {
    if (String(list[i]).toLowerCase() === OVERHEAD_HEADER) return Number(list[i + 1]);
  }
  return null;
}

export async function runNonStreamLoad(o: NonStreamLoadOptions): Promise<LoadResult> {
  const u = new URL(o.url);
  const result: LoadResult = { completed: 0, errors: 0, elapsedMs: 0, latenciesMs: [], ttftMs: [], overheadMs: [], errorSamples: [] };
  const headers = { "content-type": "application/json", ...o.headers };
  const startedAt = performance.now();
  let lastAt = startedAt;
  const summary = await new Promise<autocannon.Result>((resolve, reject) => {
    const options: autocannon.Options = {
      url: `${u.protocol}//${u.host}`,
      connections: o.connections,
      duration: o.durationMs / 1000,
      maxOverallRequests: o.maxRequests,
      timeout: 30,
      requests: o.bodies.map((body) => ({ method: "POST", path: u.pathname, headers, body })),
      setupClient(client) {
        client.on("headers", (info: unknown) => {
          const ms = overheadOf(info);
          if (ms !== null) result.overheadMs.push(ms);
        });
      },
    };
    const instance = autocannon(options, (err: unknown, res: autocannon.Result) => (err ? reject(err) : resolve(res)));
    instance.on("response", (_client, status, _bytes, ms) => {
      lastAt = performance.now();
      if (status === 200) {
        result.completed++;
        result.latenciesMs.push(ms);
      } else {
        result.errors++;
        if (result.errorSamples.length < 5) result.errorSamples.push(`HTTP ${status}`);
      }
    });
  });
  // Connection errors and timeouts (autocannon counts timeouts in `errors` too) had no response.
  if (summary.errors > 0) {
    result.errors += summary.errors;
    result.errorSamples.push(`${summary.errors} connection errors, ${summary.timeouts} timeouts`);
  }
  result.elapsedMs = lastAt - startedAt;
  return result;
}
