import { afterEach, describe, expect, it, vi } from "vitest";
import { TAP_DRAIN_MS, TAP_READ_BYTES, TAP_READS_PER_DRAIN, UsageTap } from "../../src/stream/usage-tap.ts";

const enc = new TextEncoder();
const usageEvent = 'data: {"choices":[],"usage":{"prompt_tokens":100,"completion_tokens":2000,"prompt_tokens_details":{"cached_tokens":64}}}\n\n';

/** A byte stream (BYOB reads fill a buffer from everything queued), as workerd's bodies are. */
function byteSource(chunks: string[]): ReadableStream<Uint8Array> {
  let i = 0;
  return new ReadableStream({
    type: "bytes",
    pull(c) {
      const next = chunks[i++];
      if (next === undefined) c.close();
      else c.enqueue(enc.encode(next));
    },
  });
}

/** A byte stream of an event a millisecond, until it is cancelled. */
function endlessBytes(): { endless: ReadableStream<Uint8Array>; cancelled: () => boolean } {
  let cancelled = false;
  const endless = new ReadableStream<Uint8Array>({
    type: "bytes",
    pull: (c) => new Promise((r) => setTimeout(() => r(cancelled ? undefined : c.enqueue(enc.encode("data: {}\n\n"))), 1)),
    cancel: () => void (cancelled = true),
  });
  return { endless, cancelled: () => cancelled };
}

describe("UsageTap", () => {
  it("reads a body of many buffers' worth from its tee branch: its length, first bytes' time and final usage", async () => {
    const events = Array.from({ length: 2000 }, (_, i) => `data: {"choices":[{"delta":{"content":"t${i}"}}]}\n\n`);
    const chunks = [...events, usageEvent.slice(0, 50), usageEvent.slice(50), "data: [DONE]\n\n"];
    const total = enc.encode(chunks.join("")).length;
    expect(total).toBeGreaterThan(4 * TAP_READ_BYTES);
    const [client, branch] = byteSource(chunks).tee();
    let clock = 10;
    const tap = new UsageTap(branch, () => clock++, null, true);
    expect(await new Response(client).text()).toBe(chunks.join(""));
    tap.finish();
    expect(await tap.ended).toEqual({ bytes: total, events: 2002, firstAt: 10, usage: { promptTokens: 100, completionTokens: 2000, cachedTokens: 64, cacheReported: true } });
  });

  it("stops when cancelled, and the body's source is cancelled once the client's branch is too", async () => {
    const { endless, cancelled } = endlessBytes();
    const [client, branch] = endless.tee();
    const tap = new UsageTap(branch, () => 1);
    const reader = client.getReader();
    await reader.read();
    tap.cancel();
    await reader.cancel();
    expect(await tap.ended).toMatchObject({ firstAt: 1, usage: null });
    expect(cancelled()).toBe(true);
  });

  it("reads what its branch had queued when the client left before it lets go: the events the client was sent, what an estimate charges", async () => {
    const { endless, cancelled } = endlessBytes();
    const [client, branch] = endless.tee();
    const tap = new UsageTap(branch, () => 1, null, true);
    const reader = client.getReader();
    // Far less than a drain's wait: the tap has read the first event only.
    for (let i = 0; i < 40; i++) await reader.read();
    tap.cancel();
    await reader.cancel();
    const { events } = await tap.ended;
    expect(events).toBeGreaterThanOrEqual(40);
    expect(events).toBeLessThanOrEqual(42);
    expect(cancelled()).toBe(true);
  });

  describe("while the body flows", () => {
    afterEach(() => void vi.useRealTimers());

    /** A byte stream that makes a chunk of `size` bytes each time it is pulled, counting the pulls. */
    function counted(size: number): { stream: ReadableStream<Uint8Array>; pulls: () => number } {
      let pulls = 0;
      const stream = new ReadableStream({ type: "bytes", pull: (c) => void (pulls++, c.enqueue(new Uint8Array(size).fill(0x61))) });
      return { stream, pulls: () => pulls };
    }

    it("reads the first bytes at once, then nothing until a drain is due: no read pending that would pull the upstream for it", async () => {
      vi.useFakeTimers();
      const { stream, pulls } = counted(100);
      const tap = new UsageTap(stream, () => 0);
      await vi.advanceTimersByTimeAsync(0);
      expect(pulls()).toBe(1);
      await vi.advanceTimersByTimeAsync(TAP_DRAIN_MS - 1);
      expect(pulls()).toBe(1);
      await vi.advanceTimersByTimeAsync(1);
      expect(pulls()).toBe(2);
      tap.cancel();
      // Leaving, it reads once more what the branch has (here the upstream has it at once).
      expect(await tap.ended).toMatchObject({ bytes: 300 });
    });

    it("stops a drain after TAP_READS_PER_DRAIN full reads, however much more the upstream has", async () => {
      vi.useFakeTimers();
      const { stream, pulls } = counted(TAP_READ_BYTES);
      const tap = new UsageTap(stream, () => 0);
      await vi.advanceTimersByTimeAsync(0);
      expect(pulls()).toBe(TAP_READS_PER_DRAIN);
      await vi.advanceTimersByTimeAsync(TAP_DRAIN_MS);
      expect(pulls()).toBe(2 * TAP_READS_PER_DRAIN);
      // Left by its client, it reads at most one drain's worth more, however much the upstream has.
      tap.cancel();
      await tap.ended;
      expect(pulls()).toBeLessThanOrEqual(3 * TAP_READS_PER_DRAIN + 1);
    });
  });
});
