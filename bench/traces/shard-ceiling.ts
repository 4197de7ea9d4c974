import { GroupSettingsSchema } from "../../src/config/schema.ts";
import type { ChatCompletionRequest } from "../../src/openai/requests.ts";
import { chatFingerprint } from "../../src/prefix/fingerprint.ts";
import { ShardKeys } from "../../src/sharding/shard-key.ts";
import { shardOrder } from "../../src/sharding/shard-order.ts";
import type { TimedTrace } from "./timed.ts";

/**
 * The prefix ceiling (prefix-ceiling.ts) of a group split over `shards` equal shards: each shard one
 * infinite cache, each request sent, in arrival order, to the shard the gateway's own shard key
 * puts it on (src/sharding/shard-key.ts and shard-order.ts, one isolate, the group's default
 * block size) — and never elsewhere: no bounded loads, no eviction, no timing. Against the
 * one-cache ceiling it is what the key alone costs, which a run on the fleet cannot tell apart
 * from its run-to-run noise where a few requests carry most of the hits.
 */
export function shardCeiling(trace: Pick<TimedTrace, "blockTokens" | "requests">, shards: number): number | null {
  const settings = GroupSettingsSchema.parse({ name: "ceiling" });
  const fingerprint = { blockChars: settings.blockChars, maxBlocks: settings.maxPrefixBlocks };
  const weights = new Array<number>(shards).fill(1);
  const keys = new ShardKeys();
  const seen = Array.from({ length: shards }, () => new Set<number>());
  let prompt = 0;
  let cached = 0;
  for (const request of trace.requests) {
    const chain = chatFingerprint({ model: "ceiling", messages: request.messages() } as ChatCompletionRequest, fingerprint);
    const shard = shards === 1 ? 0 : (shardOrder(keys.keyOf(chain, shards), weights)[0] as number);
    const cache = seen[shard] as Set<number>;
    for (let i = 0; i < request.blocks.length && cache.has(request.blocks[i] as number); i++) {
      cached += Math.min(trace.blockTokens, request.promptTokens - i * trace.blockTokens);
    }
    for (const block of request.blocks) cache.add(block);
    prompt += request.promptTokens;
  }
  return prompt === 0 ? null : cached / prompt;
}
