/**
 * Chain of block hashes over a stream of text: h[i] covers every character up to the end of
 * block i, so equal h[i] means equal prefixes (up to hash collisions, which only cost a cache
 * miss). Two 32-bit lanes give 53-bit values that survive RPC as plain numbers.
 *
 * The loop runs once per character of every prompt, so it is kept to what V8 optimises once and
 * leaves optimised: a function of its arguments alone (BlockHasher.hashInto), int32 lanes, the hashes in a
 * typed array with room made before the loop (module note below).
 */
export class BlockHasher {
  /**
   * The two lanes, the characters in the open block, and the hashes made: int32s between pushes.
   * In a typed array rather than fields: stored back as properties after the loop, they had Node's
   * V8 deoptimise it at those stores on about half its calls ("insufficient type feedback").
   */
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

  /** The chain so far, as a plain array (what the route call carries); copied by hand, quicker than Array.from's iterator. */
  get hashes(): number[] {
    const n = this.state[COUNT] as number;
    const { blocks } = this;
    const out: number[] = [];
    for (let i = 0; i < n; i++) out.push(blocks[i] as number);
    return out;
  }

  push(text: string): void {
    const { state, maxBlocks, blockChars } = this;
    const count = state[COUNT] as number;
    if (count >= maxBlocks) return;
    // Room for every block this text can close, made before the loop: nothing in the loop runs rarely.
    const room = Math.min(maxBlocks, count + Math.floor(((state[FILLED] as number) + text.length) / blockChars));
    if (room > this.blocks.length) this.blocks = grown(this.blocks, room, maxBlocks);
    BlockHasher.hashInto(text, state, this.blocks, blockChars, maxBlocks);
  }

  /**
   * The loop, over one text: the state's lanes and counts in and out, closed blocks' hashes into
   * `blocks` (room made by the caller). It touches nothing but its arguments. A static method, so
   * that its name survives the bundle's minifier in V8's traces (test/e2e/block-hasher-jit.test.ts).
   */
  private static hashInto(text: string, state: Int32Array, blocks: Float64Array, blockChars: number, maxBlocks: number): void {
    let count = state[COUNT] as number;
    let a = state[A] as number;
    let b = state[B] as number;
    let filled = state[FILLED] as number;
    for (let i = 0, n = text.length; i < n; i++) {
      const c = text.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
      b ^= b >>> 15;
      if (++filled === blockChars) {
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
      if (count === this.blocks.length) this.blocks = grown(this.blocks, count + 1, this.maxBlocks);
      this.blocks[count] = finish(state[A] as number, state[B] as number);
      state[COUNT] = count + 1;
      state[FILLED] = 0;
    }
  }
}

/** Room for a short prompt's chain, 64 bytes (V8 keeps a typed array that small on its heap); a longer one's is made before its text is hashed. */
const INITIAL_BLOCKS = 8;
/** FNV-1a's offset basis and the second lane's seed, as int32s (the same bits: every use goes through ToInt32). */
const LANE_A_SEED = 0x811c9dc5 | 0;
const LANE_B_SEED = 0x9747b28c | 0;
/** Where each part of the state sits. */
const A = 0;
const B = 1;
const FILLED = 2;
const COUNT = 3;

/** `blocks` with room for at least `room` hashes: twice as many, up to maxBlocks. */
function grown(blocks: Float64Array<ArrayBuffer>, room: number, maxBlocks: number): Float64Array<ArrayBuffer> {
  const more = new Float64Array(Math.min(maxBlocks, Math.max(room, blocks.length * 2)));
  more.set(blocks);
  return more;
}

/*
 * Why the loop looks as it does. Each of these deoptimised V8's optimised loop in workerd, on every
 * new hasher (one per request) or on the first that reached it: lanes seeded above 2^31 (not int32:
 * "lost precision"); an empty `[]` of hashes whose first 53-bit hash changed its elements kind ("not
 * a Smi"); and, once the hashes were in a typed array grown inside the loop, the growth's property
 * reads, which had not run when the loop was compiled ("insufficient type feedback"). After a
 * deoptimisation V8 sometimes never optimised the loop again: about two gateway processes in five
 * before, one in twelve with the growth still inside, and the Worker then spent twice the CPU on a
 * request with a 20 KB prompt (README, Benchmarks → Gateway processes). test/unit/block-hasher-jit
 * and test/e2e/block-hasher-jit watch V8's deoptimisations of it.
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
