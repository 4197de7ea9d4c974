import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import { sampleSum } from "../support/metrics-scrape.ts";
import { chat, conversation, EVENTUALLY, gateway } from "./gateway.ts";

/**
 * Usage is read for a virtual key that counts tokens, or for the share of requests a group's
 * `feedback.sampleRate` picks (0 here): a chunk hook (the "sdk" group's restamp) takes the
 * JavaScript loop, which sees every byte, but reads no usage — nor teaches routing from it.
 */

const SCRAPER = { authorization: `Bearer ${env.KVGATE_ADMIN_KEY}` };

async function scrape(): Promise<string> {
  const res = await gateway("/metrics", { headers: SCRAPER });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return text;
}

describe("a group with a chunk hook and feedback off", () => {
  it("reads no answer's usage with the master key: nothing counted as read, nothing learned", async () => {
    const group = "sdk";
    const before = await scrape();
    const okBefore = sampleSum(before, "kvgate_requests_total", { group, outcome: "ok" });
    const requests: Record<string, unknown>[] = [{}, {}, {}, { stream: true, stream_options: { include_usage: true } }];
    for (const [i, extra] of requests.entries()) {
      const res = await chat(group, conversation(`usage-reads-${i}`), extra);
      expect(res.status).toBe(200);
      // Every answer carries the simulator's usage: there was something to read.
      expect(await res.text()).toContain('"prompt_tokens"');
    }
    // Once the routing object has every release (the isolate flushes them), each counted ok.
    let after = "";
    await vi.waitFor(async () => {
      after = await scrape();
      expect(sampleSum(after, "kvgate_requests_total", { group, outcome: "ok" }) - okBefore).toBeGreaterThanOrEqual(requests.length);
    }, EVENTUALLY);
    for (const name of ["kvgate_usage_reads_total", "kvgate_cache_reports_total", "kvgate_prompt_tokens_total", "kvgate_learned_chars_per_token"]) {
      expect({ name, read: sampleSum(after, name, { group }) }).toEqual({ name, read: sampleSum(before, name, { group }) });
    }
  });
});
