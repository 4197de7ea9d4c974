import type { ResolvedGroup } from "../../src/config/load.ts";
import type { LearnedSnapshot } from "../../src/routing/feedback.ts";
import { ChatCompletionRequestSchema } from "../../src/openai/requests.ts";
import { chatFingerprint, promptBlocks } from "../../src/prefix/fingerprint.ts";
import type { GpuProfile } from "../fleet/presets.ts";
import { renderChat } from "../fleet/prompt-render.ts";
import { textBlocks } from "../fleet/prompt-blocks.ts";
import { scheduleOpenLoop, type OpenLoopRequest, type OpenLoopResult, type SendRequest } from "../replay/open-loop.ts";
import type { RequestResult } from "../replay/types.ts";
import type { TimedTrace } from "../traces/timed.ts";
import { mulberry32 } from "../traces/prng.ts";
import type { SchedulingPolicy, Ticket } from "../fleet/scheduler.ts";
import { inVirtualTime } from "./clock.ts";
import { VirtualWorker } from "./fleet.ts";
import { VirtualGateway } from "./gateway.ts";

export interface VirtualReplayOptions {
  trace: TimedTrace;
  arrivalsMs: readonly number[];
  /** kvgate's group in front of the fleet, one deployment per worker (bench/routing/kvgate-config.ts). */
  group: ResolvedGroup;
  /** Every worker's profile, at the run's time scale. */
  profile: GpuProfile;
  model: string;
  /** A request not answered in full this long after it was sent is an error, and the client leaves. */
  timeoutMs: number;
  /**
   * Seeds the routers' draws (ties, random picks) and each request's hop from the gateway to its
   * worker: a time drawn between 0 and `hopMs`. The hops stand for what the HTTP path takes
   * (kvgate's own ~1 ms, the sockets); they also make each seed another of the paths the same
   * traffic can take, as two runs of bench:routing on a busy machine are.
   */
  seed: number;
  hopMs: number;
  /**
   * A second hop, before the request is routed: a time drawn between 0 and this, from its own
   * seeded stream (so 0 or absent leaves every other draw, and every run, as it was). The HTTP
   * path's delays fall on both sides of the routing decision: the client's socket and the Worker's
   * start before it, the fetch to the worker and its read after it. Drawn only after it, a hop
   * reorders a burst the router has already queued: a short prompt routed first lands behind the
   * long ones routed after it, which the router priced as queued behind it. On Mooncake slices 1-3
   * that put prefix-aware's TTFT p50 at 1.23 x the fleet's (least-loaded's 1.03 x, round-robin's
   * 0.95 x); with 0-10 ms on each side, 1.06 x, 1.00 x and 1.02 x (16 draws; README, Routing →
   * *In virtual time*).
   */
  preRouteHopMs?: number;
  /**
   * ms per MB of a request's body before it is routed: a gateway reads, parses and fingerprints a
   * body in a time that grows with it, so in a burst the small bodies reach the router and the
   * engines first, as on the fleet (Mooncake slice 1, round-robin: of 71 pairs of one burst on one
   * backend that changed order, 68 changed it by the smaller body). 0 or absent: none.
   */
  msPerMb?: number;
  /** Requests open at once at most, as the HTTP replay has it. */
  maxInFlight: number;
  /** The workers' order for waiting requests; under `priority` a request carries its route decision's. */
  schedulingPolicy?: SchedulingPolicy;
  /**
   * The Worker as it was before f50698c, sending no prompt size beside a cut chain: the router
   * then queues such a prompt as its chain's length. For an A/B of that change in one harness.
   */
  chainOnly?: boolean;
  /**
   * Feedback from the engines on (a group's `feedback.sampleRate` 1): every answered request's
   * release carries the worker's usage, cached tokens reported, and its streamed first token's
   * time, as the Worker reads them from the stream (src/routing/feedback.ts learns from them).
   */
  feedback?: boolean;
  /**
   * Another trace replayed through the same gateway and workers first, not counted: a gateway
   * runs longer than one trace (bench:routing-feedback's learning pass). Its arrivals are from its
   * own start; the measured trace's from the end of it.
   */
  before?: { trace: TimedTrace; arrivalsMs: readonly number[] };
  /** Told, once every timer has run, how many leases the routing objects still count (a leak if any), how many expired unrenewed, and what the backends learned. */
  onEnd?: (end: { leases: number; expired: number; learned: LearnedSnapshot[] }) => void;
}

/**
 * An open-loop replay of `trace` through kvgate's routing (VirtualGateway) to the simulator's
 * engine (VirtualWorker), in virtual time: the same schedule as bench:routing's open-loop runs
 * (bench/replay/open-loop.ts's rules, its arrival times), the same request bodies, fingerprinted
 * as the Worker does and rendered as the simulated worker does, and the same client timeout. A
 * run takes seconds instead of minutes and gives the same figures every time for the same inputs.
 */
export function replayVirtual(o: VirtualReplayOptions): OpenLoopResult {
  return inVirtualTime((clock) => {
    const gateway = new VirtualGateway(o.group, mulberry32(o.seed).next, clock.now);
    const hop = mulberry32(o.seed ^ 0x5bd1e995).next;
    const preRouteHop = mulberry32(o.seed ^ 0x27d4eb2f).next;
    const workers = o.group.deployments.map(() => new VirtualWorker(o.profile, o.schedulingPolicy));
    const workerOf = new Map(o.group.deployments.map((d, i) => [d.id, workers[i] as VirtualWorker]));
    const fingerprint = { blockChars: o.group.blockChars, maxBlocks: o.group.maxPrefixBlocks };

    const send: SendRequest = (request, turn, done) => {
      const sentAt = clock.now();
      const body = { model: o.model, messages: request.messages(), max_tokens: request.maxTokens, stream: true, stream_options: { include_usage: true } };
      const outcome = (status: number, error: string | null, extra: Partial<RequestResult> = {}): RequestResult => ({
        session: request.id,
        turn,
        status,
        error,
        ttftMs: null,
        totalMs: clock.now() - sentAt,
        promptTokens: null,
        cachedTokens: null,
        completionTokens: null,
        backend: null,
        reason: null,
        ...extra,
      });
      const parsed = ChatCompletionRequestSchema.safeParse(body);
      const rendered = renderChat(body);
      if (!parsed.success || !rendered.ok || !("text" in rendered)) return done(outcome(400, "the trace's request is not a valid chat request"));
      const chain = chatFingerprint(parsed.data, fingerprint);
      // The Worker estimates a cut prompt's size from the body's bytes: the JSON a client would send.
      const bytes = Buffer.byteLength(JSON.stringify(body));
      /** Past the gateway's read of the body: routed, sent to the worker after its hop, timed out on the client's clock. */
      const routeAndSend = (): void => {
        const lease = gateway.route(chain, o.chainOnly ? chain.length : promptBlocks(chain, bytes, fingerprint));
        if (!lease) return done(outcome(503, "no backend could take the request"));
        const routed = { backend: lease.decision.backendId, reason: lease.decision.reason };
        if (textBlocks(rendered.text).tokens + request.maxTokens > o.profile.maxModelLen) {
          gateway.settle(lease, "rejected");
          return done(outcome(400, "past the model's context", routed));
        }
        let firstAt: number | null = null;
        let over = false;
        let ticket: Ticket | null = null;
        const worker = workerOf.get(lease.decision.backendId) as VirtualWorker;
        const arrive = () => {
          if (over) return;
          ticket = worker.generate(rendered.text, request.maxTokens, {
            firstToken: () => (firstAt = clock.now()),
            done: (usage) => {
              if (over) return;
              over = true;
              clearTimeout(timeout);
              const ttftMs = firstAt === null ? null : firstAt - sentAt;
              const read = o.feedback === true ? { usage: { ...usage, cacheReported: true }, streamed: true } : {};
              gateway.settle(lease, "ok", { ...(ttftMs === null ? {} : { ttftMs }), durationMs: clock.now() - sentAt, ...read });
              done(outcome(200, null, { ...routed, ttftMs, promptTokens: usage.prompt, cachedTokens: usage.cached, completionTokens: usage.completion }));
            },
          }, lease.decision.priority);
        };
        setTimeout(arrive, hop() * o.hopMs);
        const timeout = setTimeout(() => {
          if (over) return;
          over = true;
          // The client leaves; the gateway sees it go and the engine drops the sequence. The lease
          // ends as the relay's end settles it: with the first token's time when one came.
          ticket?.cancel();
          const ttftMs = firstAt === null ? null : firstAt - sentAt;
          gateway.settle(lease, "client-abort", { ...(ttftMs === null ? {} : { ttftMs }), durationMs: clock.now() - sentAt });
          // The first token's time, when one came, is the request's TTFT as the HTTP replay records it.
          done(outcome(200, `no complete answer within ${o.timeoutMs} ms`, { ...routed, ttftMs, timedOutMs: o.timeoutMs }));
        }, o.timeoutMs - (clock.now() - sentAt));
      };
      const beforeRouteMs = ((o.msPerMb ?? 0) * bytes) / 1e6 + (o.preRouteHopMs ? preRouteHop() * o.preRouteHopMs : 0);
      // At once without a delay: a timer of 0 set in a timer fires 1 ms later here (clock.ts).
      if (beforeRouteMs > 0) setTimeout(routeAndSend, beforeRouteMs);
      else routeAndSend();
    };

    let requests: OpenLoopRequest[] | null = null;
    let from = 0;
    const measured = () => {
      from = clock.now();
      scheduleOpenLoop(o.trace, { arrivalsMs: o.arrivalsMs.map((at) => at + from), maxInFlight: o.maxInFlight }, send, clock.now, (r) => (requests = r));
    };
    if (o.before) scheduleOpenLoop(o.before.trace, { arrivalsMs: o.before.arrivalsMs, maxInFlight: o.maxInFlight }, send, clock.now, measured);
    else measured();
    return () => {
      if (!requests) throw new Error("the virtual replay ended with requests still open");
      o.onEnd?.({ leases: gateway.leases, expired: gateway.expired, learned: gateway.learned });
      return { requests, wallMs: clock.now() - from, serverQueue: null };
    };
  });
}
