import { JsonFieldRewriter } from "../stream/restamp.ts";
import type { Hook } from "./types.ts";

/**
 * Shows the client the model name it asked for in every chunk, where the upstream reports its
 * own: `"model":"name"` as vLLM writes it, `"model": "name"` as Python's json.dumps does, or with
 * any other JSON whitespace.
 */
export const restampHook: Hook = {
  name: "restamp",
  onChunk(ctx) {
    if (ctx.clientModel === ctx.upstreamModel) return null;
    return new JsonFieldRewriter("model", ctx.upstreamModel, ctx.clientModel);
  },
};
