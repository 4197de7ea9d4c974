/**
 * Chain of block hashes over a stream of text: h[i] covers every character up to the end of
 * block i, so equal h[i] means equal prefixes (up to hash collisions, which only cost a cache
 * miss). Two 32-bit lanes give 53-bit values that survive RPC as plain numbers.
 */
export class BlockHasher {
  private a = 0x811c9dc5; // FNV-1a offset basis
  private b = 0x9747b28c;
  private filled = 0;
  readonly hashes: number[] = [];
  private readonly blockChars: number;
  private readonly maxBlocks: number;

  constructor(blockChars: number, maxBlocks: number) {
    this.blockChars = blockChars;
    this.maxBlocks = maxBlocks;
  }

  get full(): boolean {
    return this.hashes.length >= this.maxBlocks;
  }

  push(text: string): void {
    let a = this.a;
    let b = this.b;
    let filled = this.filled;
    for (let i = 0; i < text.length; i++) {
      if (this.hashes.length >= this.maxBlocks) break;
      const c = text.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193);
      b = Math.imul(b ^ c, 0x5bd1e995);
      b ^= b >>> 15;
      if (++filled === this.blockChars) {
        this.hashes.push(finish(a, b));
        filled = 0;
      }
    }
    this.a = a;
    this.b = b;
    this.filled = filled;
  }

  /**
   * Closes a partial block at a message boundary, so appending a message to a conversation
   * leaves every earlier hash — including the previous message's tail — unchanged.
   */
  boundary(): void {
    if (this.filled > 0 && this.hashes.length < this.maxBlocks) {
      this.hashes.push(finish(this.a, this.b));
      this.filled = 0;
    }
  }
}

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
