import { describe, expect, it } from "vitest";
import { textBlocks } from "../../bench/fleet/prompt-blocks.ts";
import { renderChat } from "../../bench/fleet/prompt-render.ts";
import { TRACE_DEFAULTS, TRACE_KINDS, generateTrace, traceFootprint, type ChatMessage, type Session, type Trace } from "../../bench/traces/index.ts";

/** The messages of each request of a session, as a replay sends them (without server replies). */
function requests(session: Session): ChatMessage[][] {
  const history: ChatMessage[] = [];
  return session.turns.map((turn) => {
    const messages = turn.withHistory ? [...history, ...turn.add] : turn.add;
    if (turn.withHistory) history.push(...turn.add);
    return messages;
  });
}

const allRequests = (trace: Trace): ChatMessage[][] => trace.sessions.flatMap(requests);

function firstBlock(messages: ChatMessage[]): number {
  const rendered = renderChat({ messages });
  if (!("text" in rendered)) throw new Error("does not render");
  const block = textBlocks(rendered.text).chain[0];
  if (block === undefined) throw new Error("shorter than a block");
  return block;
}

const KB = 1024;

describe("trace generator", () => {
  it.each(TRACE_KINDS)("%s: the same seed gives the same trace, another seed another", (kind) => {
    const a = generateTrace(kind, { seed: 7, sessions: 4, turns: 3 });
    expect(generateTrace(kind, { seed: 7, sessions: 4, turns: 3 })).toEqual(a);
    const b = generateTrace(kind, { seed: 8, sessions: 4, turns: 3 });
    expect(JSON.stringify(b.sessions)).not.toBe(JSON.stringify(a.sessions));
    expect(a).toMatchObject({ kind, seed: 7, params: { seed: 7, sessions: 4, turns: 3, maxTokens: 64 } });
  });

  it.each(TRACE_KINDS)("%s: more sessions leave the first ones as they were", (kind) => {
    const small = generateTrace(kind, { seed: 3, sessions: 2 });
    const large = generateTrace(kind, { seed: 3, sessions: 16 });
    expect(large.sessions.slice(0, 2)).toEqual(small.sessions);
  });

  it("writes prose, not filler: many distinct words, no long runs of one character", () => {
    const trace = generateTrace("multi-turn", { sessions: 1, turns: 1 });
    const system = trace.sessions[0]?.turns[0]?.add[0]?.content ?? "";
    expect(new Set(system.split(/\W+/)).size).toBeGreaterThan(150);
    expect(system).not.toMatch(/(.)\1{3}/);
  });

  it("rejects unknown and inconsistent options", () => {
    expect(() => generateTrace("rag", { seed: 1, ...{ sesions: 3 } })).toThrow(/unknown trace option sesions/);
    expect(() => generateTrace("rag", { userMinChars: 500, userMaxChars: 100 })).toThrow(/userMinChars must not exceed userMaxChars/);
    expect(() => generateTrace("hot-prefix", { hotShare: 1.5 })).toThrow(/hotShare/);
    expect(() => generateTrace("multi-turn", { sessions: 0 })).toThrow(/sessions must be at least 1/);
  });
});

describe("multi-turn", () => {
  const trace = generateTrace("multi-turn", { sessions: 6 });

  it("shares one ~6 KB system prompt across sessions; short user turns; 8 turns of 64 tokens", () => {
    const systems = trace.sessions.map((s) => s.turns[0]?.add[0]);
    expect(systems.every((m) => m?.role === "system" && m.content === systems[0]?.content)).toBe(true);
    expect(systems[0]?.content.length).toBeGreaterThan(6 * KB - 64);
    expect(systems[0]?.content.length).toBeLessThanOrEqual(6 * KB);
    for (const session of trace.sessions) {
      expect(session.turns).toHaveLength(TRACE_DEFAULTS.turns);
      for (const turn of session.turns) {
        expect(turn).toMatchObject({ withHistory: true, appendReply: true, maxTokens: 64 });
        const user = turn.add.at(-1);
        expect(user?.role).toBe("user");
        expect(user?.content.length).toBeGreaterThanOrEqual(100 - 20);
        expect(user?.content.length).toBeLessThanOrEqual(400);
      }
    }
    expect(new Set(trace.sessions.map((s) => s.turns[0]?.add[1]?.content)).size).toBe(6);
  });

  it("grows each session's history: every request extends the one before", () => {
    for (const session of trace.sessions) {
      const sent = requests(session);
      for (let t = 1; t < sent.length; t++) {
        expect(sent[t]?.slice(0, sent[t - 1]?.length)).toEqual(sent[t - 1]);
        expect(sent[t]?.length).toBeGreaterThan(sent[t - 1]?.length ?? 0);
      }
    }
  });

  it("documentKB pastes a document of that size, unique to the session, into the first turn", () => {
    const pressured = generateTrace("multi-turn", { sessions: 3, documentKB: 16 });
    const firsts = pressured.sessions.map((s) => s.turns[0]?.add[1]?.content ?? "");
    for (const text of firsts) expect(text.length).toBeGreaterThan(16 * KB);
    expect(new Set(firsts.map((t) => t.slice(0, 200))).size).toBe(3);
    const base = traceFootprint(generateTrace("multi-turn", { sessions: 3 }));
    expect(traceFootprint(pressured).privateTokens).toBeGreaterThan(base.privateTokens + 3 * 4 * KB);
  });
});

describe("rag", () => {
  const trace = generateTrace("rag", { sessions: 64 });
  const labels = (content: string): number[] => [...content.matchAll(/^\[doc (\d+)\]/gm)].map((m) => Number(m[1]));

  it("sends a shared system prompt and 1–3 distinct documents in canonical order, as independent requests", () => {
    const systems = new Set<string>();
    for (const session of trace.sessions) {
      for (const turn of session.turns) {
        expect(turn).toMatchObject({ withHistory: false, appendReply: false });
        const [system, user] = turn.add;
        systems.add(system?.content ?? "");
        const docs = labels(user?.content ?? "");
        expect(docs.length).toBeGreaterThanOrEqual(1);
        expect(docs.length).toBeLessThanOrEqual(3);
        expect(docs).toEqual([...new Set(docs)].sort((a, b) => a - b));
        expect(user?.content).toMatch(/\n\nQuestion: .+\?$/s);
      }
    }
    expect(systems.size).toBe(1);
  });

  it("renders the same set of documents to the same bytes", () => {
    const bySet = new Map<string, string>();
    let repeats = 0;
    for (const [, user] of trace.sessions.flatMap((s) => s.turns.map((t) => t.add))) {
      const content = user?.content ?? "";
      const key = labels(content).join(",");
      const docs = content.slice(0, content.lastIndexOf("\n\nQuestion: "));
      const seen = bySet.get(key);
      if (seen !== undefined) {
        repeats++;
        expect(docs).toBe(seen);
      } else bySet.set(key, docs);
    }
    expect(repeats).toBeGreaterThan(10);
  });

  it("draws documents by Zipf-like popularity: a few hot, a long tail", () => {
    const counts = new Array<number>(TRACE_DEFAULTS.ragDocs).fill(0);
    for (const session of trace.sessions) for (const turn of session.turns) for (const d of labels(turn.add[1]?.content ?? "")) counts[d] = (counts[d] ?? 0) + 1;
    const sorted = [...counts].sort((a, b) => b - a);
    const median = sorted[Math.floor(sorted.length / 2)] ?? 0;
    expect(sorted[0]).toBeGreaterThan(4 * median);
  });
});

describe("tool-loop", () => {
  const trace = generateTrace("tool-loop", { sessions: 4 });

  it("starts with ~4 KB of tool schemas and a task, then adds a tool call and its 1–2 KB result per turn", () => {
    for (const session of trace.sessions) {
      const [first, ...rest] = session.turns;
      const [system, task] = first?.add ?? [];
      expect(system?.role).toBe("system");
      expect(system?.content).toContain('"type": "function"');
      expect(system?.content.length).toBeGreaterThan(4 * KB);
      expect(system?.content.length).toBeLessThan(5 * KB);
      expect(task?.role).toBe("user");
      for (const turn of rest) {
        expect(turn).toMatchObject({ withHistory: true, appendReply: false });
        const [call, result] = turn.add;
        expect(call).toMatchObject({ role: "assistant", content: "" });
        const toolCall = call?.tool_calls?.[0] as { id: string; type: string; function: { name: string; arguments: string } };
        expect(toolCall.type).toBe("function");
        expect(system?.content).toContain(`"name": "${toolCall.function.name}"`);
        expect(() => JSON.parse(toolCall.function.arguments) as unknown).not.toThrow();
        expect(result).toMatchObject({ role: "tool", tool_call_id: toolCall.id });
        expect(result?.content.length).toBeGreaterThanOrEqual(1 * KB - 100);
        expect(result?.content.length).toBeLessThanOrEqual(2 * KB);
      }
    }
  });

  it("grows the context by each tool result", () => {
    for (const session of trace.sessions) {
      const sizes = requests(session).map((messages) => JSON.stringify(messages).length);
      for (let t = 1; t < sizes.length; t++) expect(sizes[t] ?? 0).toBeGreaterThan((sizes[t - 1] ?? 0) + 1000);
    }
  });
});

describe("single-turn", () => {
  it("sends 1–3 KB prompts that share no block, not even the first, within and across seeds", () => {
    const a = generateTrace("single-turn", { sessions: 32, seed: 1 });
    const b = generateTrace("single-turn", { sessions: 32, seed: 2 });
    const sent = [...allRequests(a), ...allRequests(b)];
    for (const messages of sent) {
      expect(messages).toHaveLength(1);
      expect(messages[0]?.content.length).toBeGreaterThanOrEqual(1 * KB - 20);
      expect(messages[0]?.content.length).toBeLessThanOrEqual(3 * KB);
    }
    expect(new Set(sent.map(firstBlock)).size).toBe(sent.length);
    for (const turn of a.sessions.flatMap((s) => s.turns)) expect(turn).toMatchObject({ withHistory: false, appendReply: false });
  });
});

describe("hot-prefix", () => {
  it("sends the ~8 KB hot prefix in about 90% of requests, unique prompts in the rest", () => {
    const trace = generateTrace("hot-prefix", { sessions: 64 });
    const sent = allRequests(trace);
    const hot = sent.find((m) => m[0]?.role === "system")?.[0]?.content;
    expect(hot?.length).toBeGreaterThan(8 * KB - 64);
    const withHot = sent.filter((m) => m[0]?.content === hot);
    // 512 draws at p = 0.9: the standard deviation of the share is 1.3 points; ±5 is beyond 3.5 of them.
    expect(withHot.length / sent.length).toBeGreaterThan(0.85);
    expect(withHot.length / sent.length).toBeLessThan(0.95);
    const unique = sent.filter((m) => m[0]?.content !== hot);
    expect(unique.every((m) => m.length === 1 && m[0]?.role === "user")).toBe(true);
    expect(new Set(unique.map(firstBlock)).size).toBe(unique.length);
    expect(new Set(withHot.map((m) => m[1]?.content)).size).toBe(withHot.length);
  });
});
