/**
 * The chaos figures, from what the run recorded: the client's view of every request, the
 * gateway's status polls, the fleet's fault events and each worker's request log. Pure, so the
 * arithmetic is tested without a run.
 */
import type { FaultEvent } from "../fleet/index.ts";
import type { RequestRecord } from "./load.ts";
import type { BreakerState, StatusPoll } from "./status.ts";

export interface ChaosInput {
  records: readonly RequestRecord[];
  polls: readonly StatusPoll[];
  /** The status once the load stopped and the streams drained. */
  finalPoll: StatusPoll | null;
  events: readonly FaultEvent[];
  /** Per worker, Date.now() of each inference request it received (GET probes are not logged). */
  arrivals: readonly (readonly number[])[];
  /**
   * Per worker, when the gateway routed each of those requests (its x-kvgate-routed-at stamp, on
   * the Durable Object's clock, the breakers' clock). When every request has one, a request counts
   * against an open breaker exactly when it was routed while the breaker was open.
   */
  routedAt?: readonly (readonly number[])[];
  /** Backend id of each worker, as the status names it. */
  backendIds: readonly string[];
  dyingWorker: number;
  flappingWorker: number;
  /**
   * A request that reaches a worker less than this long after its breaker opened was routed
   * before it opened (the decision, the fetch and the body take that long), so it is not counted
   * against the breaker.
   */
  graceMs: number;
}

export interface ChaosFigures {
  requests: number;
  errors_before_first_byte: number;
  streams_cut: number;
  inflight_after: Record<string, number | null>;
  breaker_open_ms: number | null;
  recovery_ms: number | null;
  sent_to_open_backend: number | null;
  // Beyond the shape:
  ok: number;
  streams_cut_without_error_event: number;
  sent_to_open_backend_by_backend: Record<string, number> | null;
  /** The same count by arrival time with no grace at all. */
  sent_to_open_backend_strict: number | null;
  /** What sent_to_open_backend was counted by: the gateway's route time, or arrival past the grace. */
  sent_to_open_backend_basis: "route-time" | "arrival-with-grace";
  /** The requests sent_to_open_backend counts (the first 50): arrival, and since when the breaker was open. */
  sent_to_open_requests: { backend: string; at: number; open_since: number }[];
  /** Each breaker's states as the polls saw them: one entry per distinct (state, since). */
  breaker_transitions: Record<string, { state: BreakerState; since: number | null; first_seen: number }[]>;
  breaker_reported: boolean;
  notes: string[];
}

interface Observation {
  sentAt: number;
  receivedAt: number;
  state: BreakerState;
  since: number | null;
}

/** The breaker of worker `index` in every poll that reported one, in poll order. */
function observations(polls: readonly StatusPoll[], id: string): Observation[] {
  const out: Observation[] = [];
  for (const p of polls) {
    const b = p.backends?.find((x) => x.id === id)?.breaker;
    if (b) out.push({ sentAt: p.sentAt, receivedAt: p.receivedAt, state: b.state, since: b.since });
  }
  return out;
}

/**
 * Time from `from` to the first observed entry into `state` at or after it (0 if the breaker was
 * already in it). With `since` the entry time is exact; without, the answer's arrival bounds it.
 */
function timeToState(obs: readonly Observation[], from: number, state: BreakerState): number | null {
  const hit = obs.find((o) => o.receivedAt >= from && o.state === state);
  if (!hit) return null;
  return Math.max(0, (hit.since ?? hit.receivedAt) - from);
}

/**
 * Intervals in which the breaker was certainly open: a poll that says "open since S" proves it
 * open from S to when the poll was sent. Without `since`, two open answers in a row are taken
 * to span the gap between them.
 */
function openIntervals(obs: readonly Observation[]): [number, number][] {
  const spans: [number, number][] = [];
  obs.forEach((o, i) => {
    if (o.state !== "open") return;
    if (o.since !== null) spans.push([o.since, o.sentAt]);
    else {
      const next = obs[i + 1];
      if (next && next.state === "open" && next.since === null) spans.push([o.receivedAt, next.sentAt]);
    }
  });
  spans.sort((a, b) => a[0] - b[0]);
  const merged: [number, number][] = [];
  for (const [start, end] of spans) {
    const last = merged.at(-1);
    if (last && start <= last[1]) last[1] = Math.max(last[1], end);
    else if (end > start) merged.push([start, end]);
  }
  return merged;
}

/** The arrivals inside a span (past its first graceMs), each with the span's start. */
function within(times: readonly number[], spans: readonly [number, number][], graceMs: number): { at: number; since: number }[] {
  const out: { at: number; since: number }[] = [];
  for (const at of times) {
    const span = spans.find(([start, end]) => at >= start + graceMs && at <= end);
    if (span) out.push({ at, since: span[0] });
  }
  return out;
}

function transitions(obs: readonly Observation[]): ChaosFigures["breaker_transitions"][string] {
  const out: ChaosFigures["breaker_transitions"][string] = [];
  for (const o of obs) {
    const last = out.at(-1);
    if (last && last.state === o.state && last.since === o.since) continue;
    out.push({ state: o.state, since: o.since, first_seen: o.receivedAt });
  }
  return out;
}

export function chaosFigures(input: ChaosInput): ChaosFigures {
  const notes: string[] = [];
  const { records, backendIds } = input;
  const count = (f: (r: RequestRecord) => boolean): number => records.reduce((n, r) => n + (f(r) ? 1 : 0), 0);
  const cut = records.filter((r) => r.outcome === "cut");

  const inflight: Record<string, number | null> = {};
  const final = input.finalPoll?.backends ?? null;
  for (const id of backendIds) inflight[id] = final?.find((b) => b.id === id)?.inFlight ?? null;
  if (!final) notes.push(`inflight_after: the final status could not be read (${input.finalPoll?.error ?? "no poll"}).`);

  const obsOf = backendIds.map((id) => observations(input.polls, id));
  const breakerReported = obsOf.some((o) => o.length > 0);
  let breakerOpenMs: number | null = null;
  let recoveryMs: number | null = null;
  let sent: number | null = null;
  let strict: number | null = null;
  let byBackend: Record<string, number> | null = null;
  const sentRequests: ChaosFigures["sent_to_open_requests"] = [];
  const routed = input.routedAt;
  const byRouteTime = routed !== undefined && routed.some((r) => r.length > 0) && routed.every((r, i) => r.length === (input.arrivals[i] ?? []).length);

  if (!breakerReported) {
    notes.push("The gateway's status reports no breaker (backends[i].breaker): breaker_open_ms, recovery_ms and sent_to_open_backend are null.");
  } else {
    const death = input.events.find((e) => e.worker === input.dyingWorker && e.kind === "dead");
    if (!death) notes.push("breaker_open_ms: the dying worker never died.");
    else {
      breakerOpenMs = timeToState(obsOf[input.dyingWorker] ?? [], death.at, "open");
      if (breakerOpenMs === null) notes.push(`breaker_open_ms: the breaker of ${backendIds[input.dyingWorker]} was never seen open after its backend died.`);
    }
    const lastUp = input.events.filter((e) => e.worker === input.flappingWorker && e.kind === "up").at(-1);
    if (!lastUp) notes.push("recovery_ms: the flapping worker never came back up.");
    else {
      recoveryMs = timeToState(obsOf[input.flappingWorker] ?? [], lastUp.at, "closed");
      if (recoveryMs === null) {
        const lastSeen = obsOf[input.flappingWorker]?.at(-1)?.state ?? "unknown";
        notes.push(`recovery_ms: the breaker of ${backendIds[input.flappingWorker]} did not close after its backend's last return (last seen ${lastSeen}).`);
      }
    }
    byBackend = {};
    sent = 0;
    strict = 0;
    for (const [i, id] of backendIds.entries()) {
      const spans = openIntervals(obsOf[i] ?? []);
      const times = input.arrivals[i] ?? [];
      const counted = byRouteTime ? within(input.routedAt?.[i] ?? [], spans, 0) : within(times, spans, input.graceMs);
      byBackend[id] = counted.length;
      sent += counted.length;
      strict += within(times, spans, 0).length;
      for (const c of counted) if (sentRequests.length < 50) sentRequests.push({ backend: id, at: c.at, open_since: c.since });
    }
  }

  return {
    requests: records.length,
    errors_before_first_byte: count((r) => r.outcome === "early-error"),
    streams_cut: cut.length,
    inflight_after: inflight,
    breaker_open_ms: breakerOpenMs,
    recovery_ms: recoveryMs,
    sent_to_open_backend: sent,
    ok: count((r) => r.outcome === "ok"),
    streams_cut_without_error_event: cut.filter((r) => !r.errorEvent).length,
    sent_to_open_backend_by_backend: byBackend,
    sent_to_open_backend_strict: strict,
    sent_to_open_backend_basis: byRouteTime ? "route-time" : "arrival-with-grace",
    sent_to_open_requests: sentRequests,
    breaker_transitions: Object.fromEntries(backendIds.map((id, i) => [id, transitions(obsOf[i] ?? [])])),
    breaker_reported: breakerReported,
    notes,
  };
}
