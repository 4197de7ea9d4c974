/**
 * Polls the gateway's GET /v1/kvgate/status while the chaos runs, to see what the gateway thought
 * of each backend and when: in-flight counts, and the breaker's state where the gateway reports
 * one (`backends[i].breaker = { state, since }`). A gateway without breakers is read all the same;
 * its breaker is null.
 */

export type BreakerState = "closed" | "open" | "half-open";

export interface BackendObservation {
  id: string;
  inFlight: number | null;
  breaker: { state: BreakerState; since: number | null } | null;
}

export interface StatusPoll {
  /** Date.now() when the request went out and when its answer arrived: the state held in between. */
  sentAt: number;
  receivedAt: number;
  backends: BackendObservation[] | null;
  error: string | null;
}

function isRecord(x: unknown): x is Record<string, unknown> {
  return typeof x === "object" && x !== null && !Array.isArray(x);
}

function breakerOf(x: unknown): BackendObservation["breaker"] {
  if (!isRecord(x)) return null;
  const state = x.state;
  if (state !== "closed" && state !== "open" && state !== "half-open") return null;
  return { state, since: typeof x.since === "number" && Number.isFinite(x.since) ? x.since : null };
}

/** The backends of the named group in a status body, or why they could not be read. */
export function parseStatus(body: unknown, group: string): BackendObservation[] | string {
  if (!isRecord(body) || !Array.isArray(body.groups)) return "no groups in the status body";
  const g: unknown = body.groups.find((x: unknown) => isRecord(x) && x.group === group);
  if (!isRecord(g) || !Array.isArray(g.backends)) return `no group "${group}" with backends in the status body`;
  return g.backends.map((b: unknown, i: number): BackendObservation => {
    const r = isRecord(b) ? b : {};
    return {
      id: typeof r.id === "string" ? r.id : `#${i}`,
      inFlight: typeof r.inFlight === "number" ? r.inFlight : null,
      breaker: breakerOf(r.breaker),
    };
  });
}

export async function pollOnce(baseUrl: string, group: string, headers: Record<string, string>, timeoutMs: number): Promise<StatusPoll> {
  const sentAt = Date.now();
  try {
    const res = await fetch(`${baseUrl}/v1/kvgate/status`, { headers, signal: AbortSignal.timeout(timeoutMs) });
    const text = await res.text();
    if (!res.ok) return { sentAt, receivedAt: Date.now(), backends: null, error: `HTTP ${res.status}: ${text.slice(0, 200)}` };
    const parsed = parseStatus(JSON.parse(text), group);
    return typeof parsed === "string"
      ? { sentAt, receivedAt: Date.now(), backends: null, error: parsed }
      : { sentAt, receivedAt: Date.now(), backends: parsed, error: null };
  } catch (error) {
    return { sentAt, receivedAt: Date.now(), backends: null, error: error instanceof Error ? error.message : String(error) };
  }
}

export interface Poller {
  polls: StatusPoll[];
  stop(): Promise<void>;
}

/** One poll every `everyMs` (never two at once: a slow answer delays the next). */
export function startPolling(baseUrl: string, group: string, headers: Record<string, string>, everyMs: number): Poller {
  const polls: StatusPoll[] = [];
  let stopped = false;
  const run = (async () => {
    while (!stopped) {
      const started = Date.now();
      polls.push(await pollOnce(baseUrl, group, headers, 5000));
      const wait = everyMs - (Date.now() - started);
      if (wait > 0 && !stopped) await new Promise((r) => setTimeout(r, wait));
    }
  })();
  return {
    polls,
    stop: async () => {
      stopped = true;
      await run;
    },
  };
}
