/**
 * Chain of block hashes over a stream of text: h[i] covers every character up to the end of
 * block i, so equal h[i] means equal prefixes (up to hash collisions, which only cost a cache
 * miss). Two 32-bit lanes give 53-bit values that survive RPC as plain numbers.
 *
 * push's loop runs once per character of every prompt, so it is kept to what V8 optimises once
 * and leaves optimised: locals only, int32 lanes, the hashes in a typed array (module note below).
 */
export class BlockHasher {
  /** The two lanes, the characters in the open block, and the hashes made: int32s between pushes. */
  private readonly state = Int32Array.of(LANE_A_SEED, LANE_B_SEED, 0, 0);
  private blocks = new Float64Array(INITIAL_BLOCKS);
  private readonly blockChars: number;
  private readonly maxBlocks: number;

  constructor(blockChars: number, maxBlocks: number) {
    this.blockChars = blockChars;
    this.maxBlocks = maxBlocks;
  }

  get full(): boolean {
    return (this.state[COUNT] as number) >= this.maxBlocks;
  }

  /** The chain so far, as a plain array (what the route call carries). */
  get hashes(): number[] {
    return Array.from(this.blocks.subarray(0, this.state[COUNT]));
  }

  push(text: string): void {
    const { maxBlocks, blockChars, state } = this;
    let count = state[COUNT] as number;
    if (count >= maxBlocks) return;
    let blocks = this.blocks;
    let a = state[A] as number;
    let b = state[B] as number;
    let filled = state[FILLED] as number;
    for (let i = 0, n = text.length; i < n; i++) {
      const c = text.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
      b ^= b >>> 15;
      if (++filled === blockChars) {
        if (count === blocks.length) blocks = this.grow(blocks);
        blocks[count++] = finish(a, b);
        filled = 0;
        if (count >= maxBlocks) break;
      }
    }
    state[A] = a;
    state[B] = b;
    state[FILLED] = filled;
    state[COUNT] = count;
  }

  /**
   * Closes a partial block at a message boundary, so appending a message to a conversation
   * leaves every earlier hash — including the previous message's tail — unchanged.
   */
  boundary(): void {
    const { state } = this;
    const count = state[COUNT] as number;
    if ((state[FILLED] as number) > 0 && count < this.maxBlocks) {
      const blocks = count === this.blocks.length ? this.grow(this.blocks) : this.blocks;
      blocks[count] = finish(state[A] as number, state[B] as number);
      state[COUNT] = count + 1;
      state[FILLED] = 0;
    }
  }

  private grow(blocks: Float64Array<ArrayBuffer>): Float64Array<ArrayBuffer> {
    const more = new Float64Array(Math.min(blocks.length * 2, Math.max(this.maxBlocks, 1)));
    more.set(blocks);
    this.blocks = more;
    return more;
  }
}

/** Room for a short prompt's chain; a longer one's grows by doubling, up to maxBlocks. */
const INITIAL_BLOCKS = 64;
/** FNV-1a's offset basis and the second lane's seed, as int32s (the same bits: every use goes through ToInt32). */
const LANE_A_SEED = 0x811c9dc5 | 0;
const LANE_B_SEED = 0x9747b28c | 0;
/** Where each part of the state sits. */
const A = 0;
const B = 1;
const FILLED = 2;
const COUNT = 3;

/*
 * Why the loop looks as it does. In workerd's V8, two things deoptimised push's optimised loop on
 * every new hasher: lanes seeded above 2^31 (not int32: "lost precision"), and an empty `[]` of
 * hashes whose first 53-bit hash changed its elements kind ("not a Smi"). In about two of five
 * gateway processes V8 then left the loop unoptimised for good, and the Worker spent twice the CPU
 * on a request with a 20 KB prompt (README, Benchmarks → Gateway processes). A typed array has one
 * kind whatever it holds. test/unit/block-hasher-jit.test.ts and test/e2e/block-hasher-jit.test.ts
 * watch V8's deoptimisations of it.
 */

/** murmur3's 32-bit finaliser: every input bit moves every output bit. */
export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

function finish(a: number, b: number): number {
  return fmix32(a) * 0x200000 + (fmix32(b) >>> 11);
}
