import { ByteReplacer } from "../stream/restamp.ts";
import type { Hook } from "./types.ts";

const encoder = new TextEncoder();
const modelField = (name: string) => encoder.encode(`"model":${JSON.stringify(name)}`);

/**
 * Shows the client the model name it asked for in every chunk, where the upstream reports its
 * own. Works on the bytes of vLLM-style compact JSON (`"model":"name"`).
 */
export const restampHook: Hook = {
  name: "restamp",
  onChunk(ctx) {
    if (ctx.clientModel === ctx.upstreamModel) return null;
    return new ByteReplacer(modelField(ctx.upstreamModel), modelField(ctx.clientModel));
  },
};
