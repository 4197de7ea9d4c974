/**
 * Which worker served how much of a run. kvgate names the backend of each answer
 * (x-kvgate-backend); a peer names none, so for a peer the share is counted from the workers'
 * own request counters, read before and after the trace.
 */

/** kvgate's deployment id of fleet worker `index`: the names a run's backend_share uses. */
export const backendId = (index: number): string => `gpu-${index}`;

const REQUESTS_TOTAL = /^kvgate_sim_requests_total(?:\{[^}]*\})? (\d+(?:\.\d+)?)$/m;

/** The worker's kvgate_sim_requests_total from its /metrics text. */
export function requestsTotal(metricsText: string): number {
  const m = REQUESTS_TOTAL.exec(metricsText);
  if (!m) throw new Error("no kvgate_sim_requests_total in the worker's /metrics");
  return Number(m[1]);
}

export async function workerRequestCounts(workerUrls: readonly string[]): Promise<number[]> {
  return Promise.all(
    workerUrls.map(async (url) => {
      const res = await fetch(`${url}/metrics`);
      const text = await res.text();
      if (!res.ok) throw new Error(`${url}/metrics answered ${res.status}`);
      return requestsTotal(text);
    }),
  );
}

/** Each worker's part of the requests received between two readings (retries count where they landed). */
export function shareBetween(before: readonly number[], after: readonly number[]): Record<string, number> {
  const served = after.map((n, i) => n - (before[i] ?? 0));
  const total = served.reduce((a, b) => a + b, 0);
  const share: Record<string, number> = {};
  served.forEach((n, i) => (share[backendId(i)] = total === 0 ? 0 : n / total));
  return share;
}
