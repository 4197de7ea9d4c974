import { fmix32 } from "./block-hasher.ts";

/**
 * What keys an engine's prefix cache besides the prompt: vLLM's `cache_salt` (chat, completions,
 * responses: hashed into the first block, so only requests with the same salt share any block)
 * and SGLang's `extra_key` beside it. A tenant sets them to keep its cache apart from everyone
 * else's; null when the body has neither, which is every request that does not. Joined as SGLang
 * joins them (its _compute_extra_key: cache_salt then extra_key, empty ones left out), so a salt
 * "ab" is the salt "a" with extra_key "b" and the extra_key "ab": one cache there, and kept apart
 * here they were three prefix spaces, each routed away from what the engine had cached.
 */
export function cacheSaltOf(body: Readonly<Record<string, unknown>>): string | null {
  const salt = body.cache_salt;
  const extra = body.extra_key;
  const key = (typeof salt === "string" ? salt : "") + (typeof extra === "string" ? extra : "");
  return key === "" ? null : key;
}

/**
 * The prompt's chain as a salted prompt's: every hash mixed with the salt's, so the chain keeps
 * its prefix property (a conversation continued keeps its earlier hashes) under one salt, and
 * shares no block with the prompt unsalted or under another salt, as the engine's cache shares
 * none. Routed as the unsalted prompt's, a salted one went where its prefix was cached for
 * others, and missed there.
 */
export function saltedChain(chain: readonly number[], salt: string): number[] {
  let a = SALT_A_SEED;
  let b = SALT_B_SEED;
  for (let i = 0; i < salt.length; i++) {
    const c = salt.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x5bd1e995);
    b ^= b >>> 15;
  }
  const out: number[] = [];
  for (const h of chain) {
    // A chain hash is 53 bits (BlockHasher's finish): its high 32 and low 21, each mixed with a lane.
    const high = Math.floor(h / 0x200000) | 0;
    const low = h % 0x200000;
    out.push(fmix32(high ^ a) * 0x200000 + (fmix32(low ^ b) >>> 11));
  }
  return out;
}

/** Seeds apart from BlockHasher's, as int32s. */
const SALT_A_SEED = 0x2f1b3c4d;
const SALT_B_SEED = 0x6a09e667;
