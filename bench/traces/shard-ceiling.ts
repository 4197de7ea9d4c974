import type { ChatCompletionRequest } from "../../src/openai/requests.ts";
import { chatFingerprint } from "../../src/prefix/fingerprint.ts";
import { ShardChoice } from "../../src/sharding/shard-choice.ts";
import { group } from "../route-object/workload.ts";
import { prefixCeiling } from "./prefix-ceiling.ts";
import type { TimedRequest, TimedTrace } from "./timed.ts";

export interface ShardCeiling {
  /** Σ cached / Σ prompt tokens over every shard; null for no tokens. */
  kvHit: number | null;
  /** Requests each shard took. */
  requests: number[];
}

/**
 * The prefix ceiling (prefix-ceiling.ts) of a group of `workers` split over `shards` routing
 * objects: each shard one infinite cache, each request, in arrival order, on the shard the
 * gateway's own ShardChoice puts it first (the group's default block size, the workers' partition
 * and weights, one isolate) — and never elsewhere: no request is in flight, so bounded loads move
 * nothing, and nothing is evicted. Against the one-cache ceiling it is what the shard key alone
 * costs, which a run on the fleet cannot tell apart from its run-to-run spread where a few
 * requests carry most of the hits.
 */
export function shardCeiling(trace: Pick<TimedTrace, "blockTokens" | "requests">, workers: number, shards: number): ShardCeiling {
  const g = group(workers, shards);
  const fingerprint = { blockChars: g.blockChars, maxBlocks: g.maxPrefixBlocks };
  const choice = new ShardChoice();
  const perShard: TimedRequest[][] = Array.from({ length: shards }, () => []);
  for (const request of trace.requests) {
    const chain = chatFingerprint({ model: g.name, messages: request.messages() } as ChatCompletionRequest, fingerprint);
    (perShard[choice.order(g, chain).order[0] as number] as TimedRequest[]).push(request);
  }
  let promptTokens = 0;
  let cachedTokens = 0;
  for (const requests of perShard) {
    const c = prefixCeiling({ blockTokens: trace.blockTokens, requests });
    promptTokens += c.promptTokens;
    cachedTokens += c.cachedTokens;
  }
  return { kvHit: promptTokens === 0 ? null : cachedTokens / promptTokens, requests: perShard.map((r) => r.length) };
}
