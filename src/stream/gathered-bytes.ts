/**
 * Bytes read from a stream, gathered into one buffer of their own: a chunk is copied in and
 * dropped, never kept. A runtime's chunk may view a store far larger than its bytes: workerd's
 * default read allocates 4 KiB for each and fills it with what one HTTP chunk held, one byte for a
 * peer that sends a byte per chunk. Kept by reference, such chunks cost 4 KiB a byte: a request
 * body of 100,000 one-byte chunks grew workerd by ~500 MiB, past an isolate's 128 MB, where the
 * count said 100 KB (test/e2e/isolate-memory.test.ts).
 *
 * The first chunk is kept as it came until a second one comes: what arrives in one chunk (nearly
 * every body and error body) is never copied. From the second chunk on, the buffer doubles as it
 * fills, up to `cap`: each byte is copied once on its way in, and on average at most once more as
 * the buffer grows — where joining the kept chunks at the end copied each once.
 */
export class GatheredBytes {
  private buffer: Uint8Array = EMPTY;
  private used = 0;
  /** Whether `buffer` is this object's own (false: the first chunk, as it came, not to be written to). */
  private owned = false;
  private readonly cap: number;
  /** How many bytes were pushed, those past `cap` (not kept) included. */
  length = 0;

  /** `cap`: the most bytes kept; what comes past it is counted and dropped. */
  constructor(cap = Number.POSITIVE_INFINITY) {
    this.cap = cap;
  }

  push(chunk: Uint8Array): void {
    this.length += chunk.length;
    const take = Math.min(chunk.length, this.cap - this.used);
    if (take <= 0) return;
    const part = take < chunk.length ? chunk.subarray(0, take) : chunk;
    if (this.used === 0) {
      this.buffer = part;
      this.used = take;
      this.owned = false;
      return;
    }
    if (!this.owned || this.used + take > this.buffer.length) this.grow(this.used + take);
    this.buffer.set(part, this.used);
    this.used += take;
  }

  /** What is kept, in order; a view valid until the next push or clear. */
  bytes(): Uint8Array {
    return this.used === this.buffer.length ? this.buffer : this.buffer.subarray(0, this.used);
  }

  /** Drops everything kept, its buffer with it. */
  clear(): void {
    this.buffer = EMPTY;
    this.used = 0;
    this.owned = false;
    this.length = 0;
  }

  private grow(need: number): void {
    const size = Math.min(this.cap, Math.max(need * 2, MIN_BUFFER_BYTES));
    const next = new Uint8Array(size);
    next.set(this.bytes());
    this.buffer = next;
    this.owned = true;
  }
}

/** The smallest buffer of its own: the size of one chunk's store in workerd, so a few small chunks cost one allocation. */
const MIN_BUFFER_BYTES = 4096;

const EMPTY = new Uint8Array(0);
