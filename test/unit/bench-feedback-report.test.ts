import { describe, expect, it } from "vitest";
import { renderFeedbackReport } from "../../bench/routing/feedback-report.ts";
import type { FeedbackResults } from "../../bench/routing/feedback-types.ts";

const results = (virtual: FeedbackResults["virtual"]): FeedbackResults => ({
  command: "npm run bench:routing-feedback -- --virtual",
  date: "d",
  quick: false,
  regime: { name: "pressured", preset: "l4-7b", time_scale: 0.2, workers: 4, trace: "multi-turn", kv_capacity_blocks_per_worker: 2691, prefill_tokens_per_sec: 22936 },
  sample_rate: 1,
  learning_pass: true,
  configs: [{ name: "right", kv: 1, rate: 1 }],
  warm_up_requests: 0,
  ...(virtual ? { virtual } : {}),
  runs: [],
});

describe("bench:routing-feedback's report of a virtual run", () => {
  it("names the delays its runs drew: a body's read and a hop on each side of routing, or the one hop of a run made before them", () => {
    expect(renderFeedbackReport(results({ draws: 16, hop_ms: 5, pre_route_hop_ms: 5, ms_per_mb: 50 }))).toContain(
      "each request routed after its body's read (50 ms per MB) and a hop of 0–5 ms, and reaching its worker after another of 0–5 ms, 16 draws per seed.",
    );
    expect(renderFeedbackReport(results({ draws: 16, hop_ms: 2 }))).toContain("each request's hop to its worker a draw of 0–2 ms, 16 draws per seed.");
    expect(renderFeedbackReport(results(undefined))).not.toContain("In virtual time");
  });
});
