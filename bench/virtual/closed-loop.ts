import type { ResolvedGroup } from "../../src/config/load.ts";
import { parseConfig } from "../../src/config/load.ts";
import { profileOf, resolveFleetOptions } from "../fleet/options.ts";
import { outputText } from "../fleet/output-text.ts";
import { renderChat } from "../fleet/prompt-render.ts";
import { textBlocks } from "../fleet/prompt-blocks.ts";
import { BLOCK_TOKENS } from "../fleet/presets.ts";
import type { CeilingPerRequest, Trace } from "../traces/index.ts";
import { sessionMessages } from "../traces/session-messages.ts";
import type { TimedRequest, TimedTrace } from "../traces/timed.ts";
import { replayVirtual } from "./replay.ts";

/**
 * A session trace (bench:routing's closed-loop traces) as the open-loop schedule takes it: every
 * session's first turn at 0, each later turn sent once the turn before it has ended — so every
 * session runs at once and its turns in order, with no pause between them, as bench/replay's
 * closed-loop replay sends them. A turn that appends its reply appends the simulator's answer
 * (`max_tokens` of its fixed words: what a simulated worker streams, and what the HTTP replay
 * appends from the stream), so a conversation's next turn finds it cached as it does on the fleet.
 * `blocks` are the rendered prompt's block hashes, 16 tokens each.
 */
export function sessionsAsTimed(trace: Trace): TimedTrace {
  const requests: TimedRequest[] = [];
  for (const session of trace.sessions) {
    let previous: number | null = null;
    for (const { turn, index: t, messages } of sessionMessages(session, (turn) => outputText(turn.maxTokens))) {
      const rendered = renderChat({ messages });
      if (!("text" in rendered)) throw new Error(`session ${session.id} turn ${t} does not render`);
      const { tokens, chain } = textBlocks(rendered.text);
      requests.push({ id: `${session.id}-${t}`, atMs: 0, after: previous, maxTokens: turn.maxTokens, promptTokens: tokens, blocks: chain, messages: () => messages });
      previous = requests.length - 1;
    }
  }
  return { kind: trace.kind, params: trace.params, blockTokens: BLOCK_TOKENS, requests };
}

/** Cache blocks of the ceiling's one worker: no trace here comes near it. */
const UNBOUNDED_BLOCKS = 1 << 22;
/** An instant worker answers at once; a timer's delay must be finite. */
const CEILING_TIMEOUT_MS = 3_600_000;

/**
 * bench:routing's closed-loop ceiling (bench/routing/ceiling.ts), in virtual time: the same trace
 * against one worker with an unbounded cache and no latency, which sees every request, answers
 * included. Request by request, as that worker reported each one's usage, so that a run's kv_hit
 * is compared with the ceiling over the requests it counts.
 */
export function closedLoopCeiling(timed: TimedTrace, model: string): CeilingPerRequest {
  const parsed = parseConfig({ modelGroups: [{ name: model, strategy: "round-robin", deployments: [{ id: "ceiling", baseUrl: "http://127.0.0.1:10000", model }] }] });
  if (!parsed.ok) throw new Error(parsed.error);
  const result = replayVirtual({
    trace: timed,
    arrivalsMs: timed.requests.map(() => 0),
    group: parsed.config.groups[0] as ResolvedGroup,
    profile: profileOf(resolveFleetOptions({ preset: "instant", workers: 1, kvCapacityBlocks: UNBOUNDED_BLOCKS })),
    model,
    timeoutMs: CEILING_TIMEOUT_MS,
    seed: 1,
    hopMs: 0,
    maxInFlight: timed.requests.length,
  });
  const cached = timed.requests.map(() => 0);
  const prompt = timed.requests.map(() => 0);
  for (const r of result.requests) {
    cached[r.index] = r.cachedTokens ?? 0;
    prompt[r.index] = r.promptTokens ?? 0;
  }
  return { cached, prompt };
}
