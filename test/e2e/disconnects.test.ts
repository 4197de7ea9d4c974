import net from "node:net";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { TAP_DRAIN_MS } from "../../src/stream/usage-tap.ts";
import { startHostileUpstream, type HostileUpstream } from "../support/hostile-upstream.ts";
import { rawPost, type RawExchange } from "./client.ts";
import { EVENTUALLY, startTestGateway, type TestGateway } from "./gateway.ts";

/**
 * Clients that leave, over a real socket. workerd learns that a client has gone only when a write
 * to it fails, or at once when the client resets the connection (RST); a client that closes its
 * socket (FIN: curl -m, a closed tab) while nothing is being written is invisible until the next
 * write. These tests hold the gateway to what it can know: the upstream request is cancelled and
 * the in-flight slot freed within 5 s of the client leaving (~1 s at most in practice); and where it cannot know (a FIN on a
 * silent stream on the native path), to what bounds the slot instead.
 */

let upstream: HostileUpstream;
let gw: TestGateway;
/** The native-path groups' lease lifetime: three of them pass within a test. */
const LEASE_TTL_MS = 600;

const deployment = (behaviour: string, extra: Record<string, unknown> = {}) => ({ id: behaviour.replace(/:.*/, ""), baseUrl: `${upstream.url}/${behaviour}`, model: "hostile-7b", ...extra });

beforeAll(async () => {
  upstream = await startHostileUpstream();
  gw = await startTestGateway({
    modelGroups: [
      { name: "endless", deployments: [deployment("endless-stream")] },
      // Every request sampled for routing's feedback: its usage is read from a tapped copy of the body.
      { name: "endless-tapped", feedback: { sampleRate: 1 }, deployments: [deployment("endless-stream")] },
      { name: "firehose", deployments: [deployment("firehose-stream")] },
      { name: "firehose-tapped", feedback: { sampleRate: 1 }, deployments: [deployment("firehose-stream")] },
      // Read in JavaScript: a stall bound needs every chunk seen.
      { name: "firehose-watched", streamIdleTimeoutMs: 60_000, deployments: [deployment("firehose-stream")] },
      // A stall bound shorter than the pause of a client that stops reading.
      { name: "firehose-stall-bound", streamIdleTimeoutMs: 1_000, deployments: [deployment("firehose-stream")] },
      // A stream the gateway reads in JavaScript (it watches for stalls), on a backend with room for two.
      { name: "silent-watched", streamIdleTimeoutMs: 60_000, deployments: [deployment("silent-stream", { maxInFlight: 2 })] },
      { name: "silent-stalls", streamIdleTimeoutMs: 3_000, deployments: [deployment("silent-stream")] },
      // Read in JavaScript for a chunk hook, with no stall bound.
      { name: "silent-restamped", hooks: ["restamp"], deployments: [deployment("silent-stream")] },
      // The default path, the native pipe, with leases short enough to expire within a test (600 ms).
      { name: "silent-native", leaseTtlMs: LEASE_TTL_MS, deployments: [deployment("silent-stream")] },
      { name: "silent-native-tapped", leaseTtlMs: LEASE_TTL_MS, feedback: { sampleRate: 1 }, deployments: [deployment("silent-stream")] },
      { name: "silent-native-deadline", leaseTtlMs: LEASE_TTL_MS, totalTimeoutMs: 6_000, deployments: [deployment("silent-stream")] },
      { name: "stalling-native", leaseTtlMs: LEASE_TTL_MS, deployments: [deployment("silent-then-endless:4000")] },
      { name: "slow-headers", deployments: [deployment("slow-headers:20000")] },
      { name: "late-endless", deployments: [deployment("late-endless-stream:1000")] },
      // A non-streamed answer relayed by the JavaScript loop (every request sampled for routing's
      // feedback: its usage is read as it passes), generated well within a short nonStreamTimeoutMs.
      { name: "big-answer-bound", nonStreamTimeoutMs: 2_000, feedback: { sampleRate: 1 }, deployments: [deployment("big-answer:16")] },
      { name: "drip-body-bound", nonStreamTimeoutMs: 2_000, feedback: { sampleRate: 1 }, deployments: [deployment("drip-body")] },
    ],
  });
});
afterAll(async () => {
  await gw?.close();
  await upstream?.close();
});

const CHAT = "/v1/chat/completions";
const ask = (model: string, stream: boolean, extra: Record<string, unknown>) => ({ model, stream, messages: [{ role: "user", content: "hello" }], ...extra });
const post = (model: string, stream: boolean, extra: Record<string, unknown> = {}): Promise<RawExchange> => rawPost(gw.url, CHAT, ask(model, stream, extra), { authorization: `Bearer ${gw.key}` });

/**
 * The upstream request is cancelled within 5 s of `leftAt`, and the slot freed. Timed when the
 * upstream saw the cancel, not after the status calls that follow (their time is the machine's).
 * Found by the keep-alives (~1 s), a reset (ms) or the upstream's next event, a departure takes well
 * under that, on a loaded machine too; held until a silent upstream speaks, or until headers due
 * after 20 s, it is never found in it.
 */
async function expectReleasedWithin5s(group: string, behaviour: string, leftAt: number): Promise<void> {
  await vi.waitFor(() => expect(upstream.stats(behaviour).open).toBe(0), { ...EVENTUALLY, interval: 10 });
  expect(Date.now() - leftAt).toBeLessThan(5000);
  await vi.waitFor(async () => expect(await gw.inFlight(group)).toBe(0), EVENTUALLY);
  const b = (await gw.status(group)).backends[0];
  expect(b?.failed).toBe(0);
}

describe("a client that leaves", () => {
  it("mid-stream, while the upstream is still sending (FIN)", async () => {
    upstream.reset();
    const c = await post("endless", true);
    await c.waitFor(/tick/);
    expect(await gw.inFlight("endless")).toBe(1);
    const leftAt = Date.now();
    c.close();
    await expectReleasedWithin5s("endless", "endless-stream", leftAt);
  });

  it("mid-stream, on a stream whose usage is read from a tapped copy of its body (FIN)", async () => {
    // The client asks for the usage event, so nothing is taken out of the stream: the body is teed,
    // and both branches must be cancelled for the upstream request to be.
    upstream.reset();
    const c = await post("endless-tapped", true, { stream_options: { include_usage: true } });
    await c.waitFor(/tick/);
    // Event by event: the client's branch does not wait for the tap's reads to fill (16 KiB).
    expect(upstream.stats("endless-stream").bytesWritten).toBeLessThan(4096);
    expect(await gw.inFlight("endless-tapped")).toBe(1);
    const leftAt = Date.now();
    c.close();
    await expectReleasedWithin5s("endless-tapped", "endless-stream", leftAt);
  });

  it("a watched stream whose upstream went silent (FIN): an SSE comment written into the idle stream finds the client gone", async () => {
    upstream.reset();
    const c = await post("silent-watched", true);
    await c.waitFor(/first/);
    const leftAt = Date.now();
    c.close();
    await expectReleasedWithin5s("silent-watched", "silent-stream", leftAt);
  });

  it("a stream read for a chunk hook whose upstream went silent (FIN): found by the same comments, with no stall bound set", async () => {
    upstream.reset();
    const c = await post("silent-restamped", true);
    await c.waitFor(/first/);
    const leftAt = Date.now();
    c.close();
    await expectReleasedWithin5s("silent-restamped", "silent-stream", leftAt);
  });

  it("two departed clients on a backend capped at 2 do not lock everyone else out", async () => {
    upstream.reset();
    const a = await post("silent-watched", true);
    const b = await post("silent-watched", true);
    await Promise.all([a.waitFor(/first/), b.waitFor(/first/)]);
    a.close();
    b.close();
    await vi.waitFor(async () => expect(await gw.inFlight("silent-watched")).toBe(0), EVENTUALLY);
    const third = await post("silent-watched", true);
    await third.waitFor(/^HTTP\/1\.1 200/);
    third.close();
  });

  it("before its stall timeout: the stall is the client's leaving, not a backend failure", async () => {
    upstream.reset();
    const c = await post("silent-stalls", true);
    await c.waitFor(/first/);
    c.close();
    await vi.waitFor(async () => expect(await gw.inFlight("silent-stalls")).toBe(0), EVENTUALLY);
    const b = (await gw.status("silent-stalls")).backends[0];
    expect(b?.aborted).toBe(1);
    expect(b?.failed).toBe(0);
  });

  it.each(["silent-native", "silent-native-tapped"])("a stream on the native path whose upstream went silent, by resetting the connection (RST): found at once, request.signal being listened to for as long as the body is relayed (%s)", async (group) => {
    // The client asks for the usage event, so nothing is taken out of the stream and no hook reads it.
    upstream.reset();
    const c = await post(group, true, { stream_options: { include_usage: true } });
    await c.waitFor(/first/);
    expect(await gw.inFlight(group)).toBe(1);
    const leftAt = Date.now();
    c.reset();
    await expectReleasedWithin5s(group, "silent-stream", leftAt);
  });

  it.each([
    // Its next event, 4 s after its first, is written: the write fails.
    ["the upstream's next event", "stalling-native", "silent-then-endless"],
    // 6 s after the request: the upstream request is aborted.
    ["the group's total timeout", "silent-native-deadline", "silent-stream"],
  ])("a stream on the native path whose upstream went silent (FIN): invisible to the runtime, its lease renewed past its lifetime, until %s frees it (%s)", async (_what, group, behaviour) => {
    upstream.reset();
    const c = await post(group, true);
    await c.waitFor(/first/);
    c.close();
    // Three lease lifetimes: the lease was renewed all along, the relay not knowing the client left.
    await new Promise((r) => setTimeout(r, 3 * LEASE_TTL_MS + 200));
    expect(upstream.stats(behaviour).open).toBe(1);
    expect(await gw.inFlight(group)).toBe(1);
    await vi.waitFor(() => expect(upstream.stats(behaviour).open).toBe(0), { timeout: 15_000, interval: 20 });
    await vi.waitFor(async () => expect(await gw.inFlight(group)).toBe(0), EVENTUALLY);
    // The client's leaving, not the backend's failure.
    expect((await gw.status(group)).backends[0]).toMatchObject({ failed: 0, aborted: 1 });
  });

  it.each([true, false])("before the upstream's headers, by resetting the connection (stream: %s)", async (stream) => {
    upstream.reset();
    const c = await post("slow-headers", stream);
    await vi.waitFor(() => expect(upstream.stats("slow-headers").open).toBe(1), EVENTUALLY);
    const leftAt = Date.now();
    c.reset();
    await expectReleasedWithin5s("slow-headers", "slow-headers", leftAt);
  });

  it("before the upstream's headers, by closing its socket (FIN): found as soon as the answer starts to flow", async () => {
    // The runtime hears nothing of a closed socket until it writes to it; a stream's first write
    // comes with the upstream's headers, here after 1 s.
    upstream.reset();
    const c = await post("late-endless", true);
    await vi.waitFor(() => expect(upstream.stats("late-endless-stream").open).toBe(1), EVENTUALLY);
    c.close();
    const answerAt = Date.now() + 1000;
    await vi.waitFor(() => expect(upstream.stats("late-endless-stream").open).toBe(0), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("late-endless")).toBe(0), EVENTUALLY);
    // The stream is endless once it starts: a departure not found as it flows is never found.
    expect(Date.now() - answerAt).toBeLessThan(5000);
    expect((await gw.status("late-endless")).backends[0]?.failed).toBe(0);
  });
});

describe("a client that stops reading", () => {
  // The upstream writes as fast as it is read. Once the client's socket, the gateway's and the
  // runtime's buffers are full, it must be held back, not read into the isolate's memory: its
  // bytes written stop growing. A tapped stream's tee must not read on for its tap, nor the
  // JavaScript loop (a stall bound) on for itself.
  it.each(["firehose", "firehose-tapped", "firehose-watched"])("holds the upstream back (%s)", async (group) => {
    upstream.reset();
    const c = await post(group, true, { stream_options: { include_usage: true } });
    await c.waitFor(/xxxx/);
    c.pause();
    const written = () => upstream.stats("firehose-stream").bytesWritten;
    // Held back: two readings agree across more than one of the tap's drains (TAP_DRAIN_MS).
    await vi.waitFor(
      async () => {
        const before = written();
        await new Promise((r) => setTimeout(r, 2.5 * TAP_DRAIN_MS));
        expect(written()).toBe(before);
      },
      { timeout: 30_000, interval: 0 },
    );
    // Sockets' and the runtime's buffers: megabytes, never the gigabytes of an unbounded queue.
    expect(written()).toBeLessThan(256 * 1024 * 1024);
    c.close();
    await vi.waitFor(async () => expect(await gw.inFlight(group)).toBe(0), EVENTUALLY);
  });

  it("a non-streamed answer, for longer than the group's nonStreamTimeoutMs: the answer was generated in time, so it comes whole when the client reads again, and counts as served", async () => {
    const c = await post("big-answer-bound", false);
    await c.waitFor(/xxxx/);
    c.pause();
    await new Promise((r) => setTimeout(r, 3_000));
    c.resume();
    // The whole 16 MiB answer and the chunked body's end: its usage closes the JSON.
    await c.waitFor(/"total_tokens":4\}\}\r\n0\r\n\r\n$/, 20_000);
    await vi.waitFor(async () => expect((await gw.status("big-answer-bound")).backends[0]).toMatchObject({ inFlight: 0, completed: 1, aborted: 0 }), EVENTUALLY);
    c.close();
  });

  it("a non-streamed body that drips is still cut at the group's nonStreamTimeoutMs: the time the gateway waits on the upstream counts", async () => {
    upstream.reset();
    const c = await post("drip-body-bound", false);
    const sentAt = Date.now();
    await c.ended;
    expect(Date.now() - sentAt).toBeLessThan(5_000);
    await vi.waitFor(() => expect(upstream.stats("drip-body")).toMatchObject({ open: 0, cancelled: 1 }), EVENTUALLY);
    await vi.waitFor(async () => expect(await gw.inFlight("drip-body-bound")).toBe(0), EVENTUALLY);
    expect((await gw.status("drip-body-bound")).backends[0]).toMatchObject({ failed: 0, aborted: 1 });
  });

  it("for longer than the group's stall bound: no stall, the stream goes on when it reads again, and the backend is not blamed", async () => {
    // The upstream always has the next event; the gateway waits on the client, not on it.
    upstream.reset();
    const c = await post("firehose-stall-bound", true);
    await c.waitFor(/xxxx/);
    c.pause();
    await new Promise((r) => setTimeout(r, 3_000));
    const before = c.received().length;
    c.resume();
    await vi.waitFor(() => expect(c.received().length).toBeGreaterThan(before + 1024 * 1024), EVENTUALLY);
    expect(c.received()).not.toContain("upstream_stream_stalled");
    c.close();
    await vi.waitFor(async () => expect(await gw.inFlight("firehose-stall-bound")).toBe(0), EVENTUALLY);
    expect((await gw.status("firehose-stall-bound")).backends[0]).toMatchObject({ failed: 0, aborted: 1 });
  });
});

describe("a client that leaves in the middle of its upload", () => {
  /** The request log lines of chat requests whose body was never read (no model known), written since the gateway's `from`th log line. */
  const requestLinesSince = (from: number): Record<string, unknown>[] =>
    gw.logs.slice(from).flatMap((l) => {
      const at = l.indexOf('{"type":"request"');
      const line = at < 0 ? null : (JSON.parse(l.slice(at)) as Record<string, unknown>);
      return line?.path === CHAT && line.model === null ? [line] : [];
    });

  it.each(["content-length", "chunked"] as const)("(its body's length by %s, half of it sent, then FIN): is logged as a 499 client_closed_request, not as the gateway's own unhandled error", async (framing) => {
    const from = gw.logs.length;
    const u = new URL(gw.url);
    const socket = net.connect(Number(u.port), u.hostname);
    socket.on("error", () => {});
    await new Promise<void>((resolve) => socket.once("connect", resolve));
    const half = Buffer.from(`{"model":"endless","messages":[{"role":"user","content":"${"a".repeat(100_000)}`);
    const head = [`POST ${CHAT} HTTP/1.1`, `host: ${u.host}`, `authorization: Bearer ${gw.key}`, "content-type: application/json"];
    head.push(framing === "chunked" ? "transfer-encoding: chunked" : `content-length: ${half.length * 2}`);
    const body = framing === "chunked" ? Buffer.concat([Buffer.from(`${half.length.toString(16)}\r\n`), half, Buffer.from("\r\n")]) : half;
    await new Promise<void>((resolve) => socket.write(Buffer.concat([Buffer.from(`${head.join("\r\n")}\r\n\r\n`), body]), () => resolve()));
    // The gateway takes the request and reads what came of its body; the client then closes its socket.
    await new Promise((r) => setTimeout(r, 300));
    socket.end();
    await vi.waitFor(() => expect(requestLinesSince(from)).toHaveLength(1), EVENTUALLY);
    expect(requestLinesSince(from)[0]).toMatchObject({ status: 499, error_code: "client_closed_request" });
    expect(gw.logs.slice(from).join("\n")).not.toContain("unhandled error");
  });
});
