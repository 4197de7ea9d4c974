/**
 * How long the servers made requests wait, read from their /metrics during a replay. A simulated
 * worker (bench/fleet) reports no per-request queue time; like vLLM, it exposes gauges of the
 * requests waiting for a seat and running (`vllm:num_requests_waiting`, `vllm:num_requests_running`;
 * the simulator serves those names too). Sampled often enough, the integral of the waiting gauge
 * over the run is the sum of every request's wait: each waiting request adds its waiting time to it.
 */

export interface QueueSample {
  /** ms since the sampler started. */
  atMs: number;
  /** Summed over the workers read. */
  waiting: number;
  running: number;
}

export interface QueueSamples {
  samples: QueueSample[];
  /** Rounds left out because a worker's read failed (down, timed out). */
  failedReads: number;
}

export interface QueueSampler {
  /** Stops sampling; resolves once a round under way has ended. Stopping again returns the same samples. */
  stop(): Promise<QueueSamples>;
}

export interface ServerQueueSummary {
  samples: number;
  /** Rounds left out because a worker's read failed. */
  failed_reads: number;
  waiting: { mean: number; max: number };
  running: { mean: number; max: number };
  /** ∫ waiting dt / requests sent: the mean time a request waited in a worker's queue (to the sampling interval). */
  mean_wait_ms: number | null;
}

const READ_TIMEOUT_MS = 2000;

/** Reads every URL's /metrics every `intervalMs` (one round at a time) until stopped. */
export function startQueueSampler(urls: readonly string[], intervalMs: number): QueueSampler {
  const started = performance.now();
  const result: QueueSamples = { samples: [], failedReads: 0 };
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;
  let round: Promise<void> = Promise.resolve();
  const sample = async (): Promise<void> => {
    const atMs = performance.now() - started;
    const reads = await Promise.all(urls.map((url) => readGauges(url)));
    if (reads.every((r) => r !== null)) result.samples.push({ atMs, waiting: sum(reads, "waiting"), running: sum(reads, "running") });
    else result.failedReads++;
  };
  const tick = (): void => {
    round = sample().finally(() => {
      if (!stopped) timer = setTimeout(tick, intervalMs);
    });
  };
  tick();
  return {
    async stop() {
      stopped = true;
      clearTimeout(timer);
      await round;
      return result;
    },
  };
}

function sum(reads: readonly ({ waiting: number; running: number } | null)[], key: "waiting" | "running"): number {
  let total = 0;
  for (const r of reads) total += r?.[key] ?? 0;
  return total;
}

async function readGauges(baseUrl: string): Promise<{ waiting: number; running: number } | null> {
  try {
    const res = await fetch(`${baseUrl.replace(/\/+$/, "")}/metrics`, { signal: AbortSignal.timeout(READ_TIMEOUT_MS) });
    if (!res.ok) return null;
    const text = await res.text();
    const waiting = gauge(text, "vllm:num_requests_waiting");
    const running = gauge(text, "vllm:num_requests_running");
    return waiting === null || running === null ? null : { waiting, running };
  } catch {
    return null;
  }
}

/** The sum of a gauge's series in Prometheus text (a server may label it per model). */
export function gauge(text: string, name: string): number | null {
  let total: number | null = null;
  for (const line of text.split("\n")) {
    if (!line.startsWith(name) || (line[name.length] !== "{" && line[name.length] !== " ")) continue;
    const value = Number(line.slice(line.lastIndexOf(" ") + 1));
    if (Number.isFinite(value)) total = (total ?? 0) + value;
  }
  return total;
}

export function summarizeQueue({ samples, failedReads }: QueueSamples, requestsSent: number): ServerQueueSummary {
  let waitingArea = 0;
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1];
    const b = samples[i];
    if (a && b) waitingArea += ((a.waiting + b.waiting) / 2) * (b.atMs - a.atMs);
  }
  const stats = (key: "waiting" | "running") => ({
    mean: samples.length === 0 ? 0 : samples.reduce((t, s) => t + s[key], 0) / samples.length,
    max: samples.reduce((m, s) => Math.max(m, s[key]), 0),
  });
  return {
    samples: samples.length,
    failed_reads: failedReads,
    waiting: stats("waiting"),
    running: stats("running"),
    mean_wait_ms: requestsSent === 0 || samples.length < 2 ? null : waitingArea / requestsSent,
  };
}
