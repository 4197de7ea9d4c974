import { describe, expect, it } from "vitest";
import { chaosFigures, type ChaosInput } from "../../bench/chaos/figures.ts";
import type { RequestRecord } from "../../bench/chaos/load.ts";
import { chaosSchedule, lastUpMs } from "../../bench/chaos/schedule.ts";
import { parseStatus, type BreakerState, type StatusPoll } from "../../bench/chaos/status.ts";

const IDS = ["gpu-0", "gpu-1"];

function record(outcome: RequestRecord["outcome"], errorEvent = false): RequestRecord {
  return { startedAt: 0, endedAt: 1, outcome, status: outcome === "early-error" ? 502 : 200, errorEvent, backend: "gpu-1", reason: null, detail: null };
}

/** A poll sent at `at`, answered 5 ms later, with each backend's breaker as [state, since]. */
function poll(at: number, breakers: ([BreakerState, number] | null)[], inFlight = [0, 0]): StatusPoll {
  return {
    sentAt: at,
    receivedAt: at + 5,
    error: null,
    backends: IDS.map((id, i) => {
      const b = breakers[i];
      return { id, inFlight: inFlight[i] ?? 0, breaker: b ? { state: b[0], since: b[1] } : null };
    }),
  };
}

function input(over: Partial<ChaosInput>): ChaosInput {
  return {
    records: [],
    polls: [],
    finalPoll: poll(10_000, [null, null]),
    events: [],
    arrivals: [[], []],
    backendIds: IDS,
    dyingWorker: 0,
    flappingWorker: 1,
    graceMs: 25,
    ...over,
  };
}

describe("chaos figures", () => {
  it("classifies what the client saw", () => {
    const f = chaosFigures(input({ records: [record("ok"), record("ok"), record("early-error"), record("cut", true), record("cut", false)] }));
    expect(f).toMatchObject({ requests: 5, ok: 2, errors_before_first_byte: 1, streams_cut: 2, streams_cut_without_error_event: 1 });
  });

  it("reads inflight_after from the final status, null for a backend it does not list", () => {
    const final = poll(9000, [null, null], [0, 3]);
    final.backends = final.backends?.slice(1) ?? null;
    expect(chaosFigures(input({ finalPoll: final })).inflight_after).toEqual({ "gpu-0": null, "gpu-1": 3 });
  });

  it("reports the breaker figures as null when the status has no breaker", () => {
    const f = chaosFigures(input({ polls: [poll(100, [null, null])], events: [{ worker: 0, kind: "dead", at: 50 }] }));
    expect(f).toMatchObject({ breaker_reported: false, breaker_open_ms: null, recovery_ms: null, sent_to_open_backend: null });
    expect(f.notes.join(" ")).toMatch(/no breaker/);
  });

  it("breaker_open_ms: from the death to the breaker's `since` when first seen open", () => {
    const f = chaosFigures(
      input({
        events: [{ worker: 0, kind: "dead", at: 1000 }],
        polls: [poll(900, [["closed", 0], null]), poll(1000, [["closed", 0], null]), poll(1100, [["open", 1060], null]), poll(1200, [["open", 1060], null])],
      }),
    );
    expect(f.breaker_open_ms).toBe(60);
  });

  it("recovery_ms: from the flapping worker's last return to its breaker closing; null if it never closed", () => {
    const events: ChaosInput["events"] = [
      { worker: 1, kind: "down", at: 1000 },
      { worker: 1, kind: "up", at: 2000 },
      { worker: 1, kind: "down", at: 3000 },
      { worker: 1, kind: "up", at: 4000 },
    ];
    const polls = [poll(1900, [null, ["open", 1100]]), poll(2500, [null, ["closed", 2400]]), poll(3500, [null, ["open", 3100]]), poll(4500, [null, ["half-open", 4300]])];
    expect(chaosFigures(input({ events, polls })).recovery_ms).toBeNull();
    expect(chaosFigures(input({ events, polls: [...polls, poll(5000, [null, ["closed", 4900]])] })).recovery_ms).toBe(900);
  });

  it("sent_to_open_backend counts requests received while the breaker was certainly open, after the grace", () => {
    // Open from 1000 (seen at 1100 and 1300), half-open from 1400 (its trials do not count), open again from 1500.
    const polls = [
      poll(900, [["closed", 0], ["closed", 0]]),
      poll(1100, [["open", 1000], ["closed", 0]]),
      poll(1300, [["open", 1000], ["closed", 0]]),
      poll(1450, [["half-open", 1400], ["closed", 0]]),
      poll(1600, [["open", 1500], ["closed", 0]]),
    ];
    // 1010: within the grace (routed before it opened); 1200, 1250: counted; 1350: after the last poll that saw
    // it open, so not certain; 1420: a half-open trial; 1550: counted; 1700: after the last poll.
    const arrivals = [[950, 1010, 1200, 1250, 1350, 1420, 1550, 1700], [1200, 1250]];
    const f = chaosFigures(input({ polls, arrivals }));
    expect(f.sent_to_open_backend).toBe(3);
    expect(f.sent_to_open_backend_by_backend).toEqual({ "gpu-0": 3, "gpu-1": 0 });
    expect(f.sent_to_open_backend_strict).toBe(4);
    expect(f.sent_to_open_requests.map((r) => r.at)).toEqual([1200, 1250, 1550]);
    expect(f.breaker_transitions["gpu-0"]?.map((t) => `${t.state} ${t.since}`)).toEqual(["closed 0", "open 1000", "half-open 1400", "open 1500"]);
  });

  it("counts by the gateway's route time when every request carries it: late arrivals routed before the open do not count", () => {
    const polls = [poll(900, [["closed", 0], ["closed", 0]]), poll(1100, [["open", 1000], ["closed", 0]]), poll(1300, [["open", 1000], ["closed", 0]])];
    // Three arrive while open; two of them were routed before 1000 (delivered late), one at 1150.
    const arrivals = [[1060, 1120, 1200], []];
    const routedAt = [[990, 999, 1150], []];
    const f = chaosFigures(input({ polls, arrivals, routedAt }));
    expect(f.sent_to_open_backend_basis).toBe("route-time");
    expect(f.sent_to_open_backend).toBe(1);
    expect(f.sent_to_open_backend_strict).toBe(3);
    // A stamp missing on some request: back to arrival times with the grace.
    const partial = chaosFigures(input({ polls, arrivals, routedAt: [[990, 999], []] }));
    expect(partial.sent_to_open_backend_basis).toBe("arrival-with-grace");
    expect(partial.sent_to_open_backend).toBe(3);
  });
});

describe("chaos status parsing", () => {
  it("reads each backend's in-flight count and breaker, tolerating a missing or malformed breaker", () => {
    const body = {
      groups: [
        { group: "other", backends: [] },
        {
          group: "kvgate-sim",
          backends: [
            { id: "gpu-0", inFlight: 2, breaker: { state: "open", since: 123, opened: 1 } },
            { id: "gpu-1", inFlight: 0 },
            { id: "gpu-2", inFlight: 1, breaker: { state: "ajar", since: 5 } },
          ],
        },
      ],
    };
    expect(parseStatus(body, "kvgate-sim")).toEqual([
      { id: "gpu-0", inFlight: 2, breaker: { state: "open", since: 123 } },
      { id: "gpu-1", inFlight: 0, breaker: null },
      { id: "gpu-2", inFlight: 1, breaker: null },
    ]);
    expect(parseStatus({ groups: [] }, "kvgate-sim")).toMatch(/no group/);
  });
});

describe("chaos schedule", () => {
  it("scales with the run and lets the flapping worker come back well before the end", () => {
    for (const ms of [15_000, 60_000]) {
      const s = chaosSchedule(ms);
      expect(s.map((f) => f.role)).toEqual(["dies", "slow", "errors", "flaps"]);
      expect(s[0]?.knobs.dieAtMs).toBe(ms / 6);
      expect(lastUpMs(ms)).toBeCloseTo((39 / 60) * ms, -1);
    }
  });
});
