/**
 * Hashes prompts as the Worker does, a new BlockHasher per request, for test/unit/block-hasher-jit.test.ts
 * to run under V8's --trace-deopt. The prompts vary as requests do: long and short, Latin-1 and
 * two-byte text, strings read whole and strings built by concatenation.
 */
import { BlockHasher } from "../../src/prefix/block-hasher.ts";

const long = "You are a careful assistant. Answer from the documents given. ".repeat(320);
const wide = "日本語のドキュメントを読んでください。".repeat(200);
for (let r = 0; r < 400; r++) {
  const h = new BlockHasher(64, 2048);
  h.push("\u0001system\u0002");
  h.push(r % 5 === 0 ? wide : long);
  h.boundary();
  h.push("\u0001user\u0002");
  h.push(`question ${r}: ${"why ".repeat(r % 40)}`);
  h.boundary();
  if (h.hashes.length === 0) throw new Error("no hashes");
}
