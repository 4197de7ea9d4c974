import { UsageEventStripper } from "../stream/strip-usage.ts";
import type { Hook } from "./types.ts";

/**
 * Usage accounting, for a virtual key that counts tokens (workers/gateway/attempt.ts adds it per
 * request): a streamed chat or completion asks the upstream for its usage event, which is taken
 * out again when the client did not ask for it, and the body's tail is kept so the usage is read
 * when it ends. A non-streamed body and the Responses API's stream carry their usage anyway.
 */
export const usageHook: Hook = {
  name: "usage",
  readsUsage: true,
  onRequest(body, ctx) {
    if (!ctx.stream || (ctx.endpoint !== "chat" && ctx.endpoint !== "completions")) return;
    const asked = body.stream_options;
    const options = typeof asked === "object" && asked !== null ? (asked as Record<string, unknown>) : null;
    if (options?.include_usage === true) return;
    // vLLM reads continuous_usage_stats only with include_usage: for this client it meant nothing,
    // and kept beside the include_usage added here it would put a usage on every chunk, which the
    // stripper (one usage event, choices empty) leaves in.
    const { continuous_usage_stats: _unread, ...kept } = options ?? {};
    body.stream_options = { ...kept, include_usage: true };
    ctx.stripUsage = true;
  },
  onChunk(ctx) {
    return ctx.stripUsage ? new UsageEventStripper() : null;
  },
};
