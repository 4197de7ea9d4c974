/** Counters a worker keeps, and their Prometheus text exposition for GET /metrics. */

export interface WorkerCounters {
  /** Inference requests received (before any fault or validation). */
  requests: number;
  /** Requests answered with an error status. */
  errors: number;
  promptTokens: number;
  cachedTokens: number;
  generationTokens: number;
}

export function newCounters(): WorkerCounters {
  return { requests: 0, errors: 0, promptTokens: 0, cachedTokens: 0, generationTokens: 0 };
}

export interface WorkerGauges {
  running: number;
  waiting: number;
  kvBlocksUsed: number;
  kvBlocksCached: number;
  kvBlocksCapacity: number;
}

interface Metric {
  name: string;
  type: "counter" | "gauge";
  help: string;
  value: number;
}

/**
 * kvgate_sim_* names for kvgate's own benchmarks, plus the vLLM names (vllm:num_requests_running,
 * vllm:num_requests_waiting, vllm:kv_cache_usage_perc) that load-aware peer gateways scrape.
 */
export function renderMetrics(worker: number, model: string, c: WorkerCounters, g: WorkerGauges): string {
  const usage = g.kvBlocksCapacity > 0 ? g.kvBlocksUsed / g.kvBlocksCapacity : 0;
  const metrics: Metric[] = [
    { name: "kvgate_sim_requests_total", type: "counter", help: "Inference requests received.", value: c.requests },
    { name: "kvgate_sim_request_errors_total", type: "counter", help: "Inference requests answered with an error status.", value: c.errors },
    { name: "kvgate_sim_requests_running", type: "gauge", help: "Sequences being prefilled or decoded.", value: g.running },
    { name: "kvgate_sim_requests_queued", type: "gauge", help: "Sequences waiting for a seat or KV blocks.", value: g.waiting },
    { name: "kvgate_sim_kv_blocks_used", type: "gauge", help: "KV blocks pinned by running sequences.", value: g.kvBlocksUsed },
    { name: "kvgate_sim_kv_blocks_cached", type: "gauge", help: "KV blocks held by the prefix cache.", value: g.kvBlocksCached },
    { name: "kvgate_sim_kv_blocks_capacity", type: "gauge", help: "KV cache capacity in blocks.", value: g.kvBlocksCapacity },
    { name: "kvgate_sim_prompt_tokens_total", type: "counter", help: "Prompt tokens of admitted requests.", value: c.promptTokens },
    { name: "kvgate_sim_cached_tokens_total", type: "counter", help: "Prompt tokens served from the prefix cache.", value: c.cachedTokens },
    { name: "kvgate_sim_generation_tokens_total", type: "counter", help: "Output tokens generated.", value: c.generationTokens },
    { name: "vllm:num_requests_running", type: "gauge", help: "Number of requests in model execution batches.", value: g.running },
    { name: "vllm:num_requests_waiting", type: "gauge", help: "Number of requests waiting to be processed.", value: g.waiting },
    { name: "vllm:kv_cache_usage_perc", type: "gauge", help: "KV-cache usage. 1 means 100 percent usage.", value: usage },
  ];
  const labels = `{worker="${worker}",model_name=${JSON.stringify(model)}}`;
  let text = "";
  for (const m of metrics) text += `# HELP ${m.name} ${m.help}\n# TYPE ${m.name} ${m.type}\n${m.name}${labels} ${m.value}\n`;
  return text;
}
