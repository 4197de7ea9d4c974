/**
 * The route RPC's size for the benchmark's request, in bytes: the call kvgate's Worker sends
 * (workers/gateway/route-client.ts) and the answer it gets, for the prompt bench:ceiling sends,
 * fingerprinted by kvgate's own code with the group's defaults. Sized with V8's serializer
 * (node:v8), the structured clone that workerd's JS RPC encodes arguments and results with;
 * workerd's own envelope around them (Cap'n Proto) is not counted.
 */
import { serialize } from "node:v8";
import { GroupSettingsSchema } from "../../src/config/schema.ts";
import { chatFingerprint } from "../../src/prefix/fingerprint.ts";
import { SIM_MODEL } from "../overhead/targets.ts";
import { leaseId, type LeaseRelease, type RouteCall, type RouteDecision } from "../../src/routing/protocol.ts";
import type { ChatCompletionRequest } from "../../src/openai/requests.ts";

export interface RoutePayload {
  how: string;
  chain_blocks: number;
  /** A route call carrying no finished lease. */
  call_bytes: number;
  /** The same call carrying one finished lease (a release rides along the next route call). */
  call_with_release_bytes: number;
  answer_bytes: number;
}

const HOW =
  "node:v8 serialize (V8's structured clone, as workerd's JS RPC encodes arguments and results) of the route call kvgate's Worker sends for bench:ceiling's " +
  "request body, fingerprinted by src/prefix/fingerprint.ts with the group defaults, and of a route answer; workerd's Cap'n Proto envelope not counted.";

export function routePayload(body: string): RoutePayload {
  const settings = GroupSettingsSchema.parse({ name: SIM_MODEL });
  const chain = chatFingerprint(JSON.parse(body) as ChatCompletionRequest, { blockChars: settings.blockChars, maxBlocks: settings.maxPrefixBlocks });
  const call: RouteCall = { version: "0123456789abcdef", chain, released: [], renewed: [], exclude: [] };
  // A lease id as the object makes them: its incarnation, a 31-bit number in base 36, a dot, a sequence number.
  const lease = leaseId((0x7fffffff).toString(36), 123456);
  const release: LeaseRelease = { lease, outcome: "ok", ttftMs: 12.345, durationMs: 12.345 };
  const answer: RouteDecision = { backendId: "sim-0", lease, reason: "prefix-hit", matched: chain.length, total: chain.length, routedAt: Date.now(), rev: 1, inFlight: 37 };
  return {
    how: HOW,
    chain_blocks: chain.length,
    call_bytes: serialize(call).byteLength,
    call_with_release_bytes: serialize({ ...call, released: [release] }).byteLength,
    answer_bytes: serialize(answer).byteLength,
  };
}
