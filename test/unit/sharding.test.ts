import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import type { ResolvedGroup } from "../../src/config/load.ts";
import { parseConfig } from "../../src/config/load.ts";
import type { DecisionView } from "../../src/metrics/decisions.ts";
import { metricFamilies, type GroupMetrics } from "../../src/metrics/group-metrics.ts";
import type { ChatMessage } from "../../src/openai/requests.ts";
import { chatFingerprint, completionFingerprint } from "../../src/prefix/fingerprint.ts";
import type { GroupStatus } from "../../src/routing/protocol.ts";
import { mergeDecisions, mergeStatus, scrapedGroup } from "../../src/sharding/merge.ts";
import { groupShards, objectNamesOf, partition, shardObjectName, shardOfObject } from "../../src/sharding/partition.ts";
import { ShardChoice } from "../../src/sharding/shard-choice.ts";
import { KeyPlacements } from "../../src/sharding/key-placements.ts";
import { ShardKeys, shardKeyBounds } from "../../src/sharding/shard-key.ts";
import { boundedOrder, shardOrder } from "../../src/sharding/shard-order.ts";

const opts = { blockChars: 64, maxBlocks: 2048 };
const ids = (n: number, from = 0) => Array.from({ length: n }, (_, i) => `gpu-${from + i}.internal:8000`);
/** `n` chain hashes from `from` on: chains as the fingerprint makes them, equal numbers at a position meaning equal prefixes up to it. */
const run = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
const sizes = (owner: number[], shards: number) => owner.reduce((s, o) => (s[o] = (s[o] as number) + 1, s), new Array<number>(shards).fill(0));

/** Deterministic text of `chars` characters, different for each `seed`. */
function text(seed: string, chars: number): string {
  let out = "";
  for (let i = 0; out.length < chars; i++) out += `${seed} sentence ${i} about the weather and the tides. `;
  return out.slice(0, chars);
}

/** A raw prompt made of 2,048-character blocks named by id, as a Mooncake trace's 512-token blocks: equal ids, equal text. */
const blockPrompt = (blocks: number[]) => completionFingerprint({ model: "m", prompt: blocks.map((id) => text(`block ${id}`, 2048)).join("") }, opts);

/** Conversation `c`'s prompt at `turn`: the shared block 0, then a block of its own per turn. */
const conversationBlocks = (c: number, turn: number) => [0, ...Array.from({ length: turn }, (_, t) => 100 * (c + 1) + t)];

/** The keys 4 shards' ShardKeys gives each conversation's prompts, sent in order; the first two (keyed before any branch is known) left out. */
function keysPerConversation(sent: readonly [number, number[]][]): Map<number, Set<number>> {
  const keys = new ShardKeys();
  const out = new Map<number, Set<number>>();
  sent.forEach(([c, blocks], i) => {
    const key = keys.keyOf(blockPrompt(blocks), 4).key;
    if (i >= 2) out.set(c, (out.get(c) ?? new Set()).add(key));
  });
  return out;
}

/** Chat conversations sharing a 6 KB system prompt, each `turns` long: the chains of every turn, turn by turn, sessions interleaved. */
function conversations(sessions: number, turns: number): { session: number; turn: number; chain: number[] }[] {
  const system: ChatMessage = { role: "system", content: text("system", 6144) };
  const history: ChatMessage[][] = Array.from({ length: sessions }, () => [system]);
  const out: { session: number; turn: number; chain: number[] }[] = [];
  for (let t = 0; t < turns; t++) {
    for (let s = 0; s < sessions; s++) {
      const h = history[s] as ChatMessage[];
      h.push({ role: "user", content: text(`session ${s} question ${t}`, 100 + ((s * 37 + t * 53) % 300)) });
      out.push({ session: s, turn: t, chain: chatFingerprint({ model: "m", messages: [...h] }, opts) });
      h.push({ role: "assistant", content: text(`session ${s} answer ${t}`, 256) });
    }
  }
  return out;
}

describe("partition: each deployment's shard", () => {
  it("splits the deployments evenly, whatever their number, and the same whatever their order", () => {
    for (const shards of [2, 3, 4, 8]) {
      for (let n = 0; n <= 40; n++) {
        const s = sizes(partition(ids(n), shards), shards);
        expect(Math.max(...s) - Math.min(...s), `${n} over ${shards}`).toBeLessThanOrEqual(1);
      }
    }
    const list = ids(32);
    const owner = new Map(list.map((id, i) => [id, partition(list, 4)[i]]));
    const reversed = [...list].reverse();
    const again = partition(reversed, 4);
    reversed.forEach((id, i) => expect(again[i]).toBe(owner.get(id)));
  });

  it("moves few others when a deployment joins or leaves", () => {
    let moved = 0;
    let cases = 0;
    for (const shards of [2, 4, 8]) {
      for (const n of [8, 16, 32, 64]) {
        const before = partition(ids(n), shards);
        const joined = partition(ids(n + 1), shards);
        const left = partition(ids(n - 1, 1), shards);
        for (let i = 0; i < n; i++) if (before[i] !== joined[i]) moved++;
        for (let i = 1; i < n; i++) if (before[i] !== left[i - 1]) moved++;
        cases += 2;
      }
    }
    // Re-dealing every deployment would move (shards − 1) / shards of them: about 19 of 32 here on average.
    expect(moved / cases).toBeLessThan(1.5);
  });

  it("gives shard 0 the group's own name and the others names no group can have", () => {
    expect(shardObjectName("chat", 0)).toBe("chat");
    expect(objectNamesOf("chat", 3)).toEqual(["chat", "chat\u001f1", "chat\u001f2"]);
    expect(objectNamesOf("chat", undefined)).toEqual(["chat"]);
    expect(shardOfObject("chat\u001f2")).toEqual({ group: "chat", shard: 2 });
    expect(shardOfObject("chat")).toEqual({ group: "chat", shard: 0 });
    const named = parseConfig(JSON.stringify({ modelGroups: [{ name: "chat\u001f1", deployments: [] }] }));
    expect(named.ok).toBe(false);
  });

  it("hands each shard the group with its own deployments, and weighs only those taking requests", () => {
    const parsed = parseConfig(
      JSON.stringify({
        modelGroups: [{ name: "g", shards: 2, deployments: ids(5).map((id, i) => ({ id, baseUrl: `http://10.0.0.${i + 1}:8000`, model: "m", weight: i === 0 ? 2 : 1 })) }],
      }),
    );
    if (!parsed.ok) throw new Error(parsed.error);
    const group = parsed.config.groups[0] as ResolvedGroup;
    const s = groupShards(group);
    expect(s.count).toBe(2);
    expect(s.objectNames).toEqual(["g", "g\u001f1"]);
    expect(s.views.flatMap((v) => v.deployments.map((d) => d.id)).sort()).toEqual(ids(5).sort());
    expect(s.views.every((v) => v.version === group.version)).toBe(true);
    const weightOf = (i: number) => (s.views[i] as ResolvedGroup).deployments.reduce((w, d) => w + d.weight, 0);
    expect(s.weights).toEqual([weightOf(0), weightOf(1)]);
    expect(groupShards(group)).toBe(s);
  });
});

describe("ShardKeys: the prefix that decides a prompt's shard", () => {
  it("keys every conversation that shares a system prompt by its own first message, once two have been seen", () => {
    const keys = new ShardKeys();
    const seen = conversations(8, 6).map((r) => ({ ...r, key: keys.keyOf(r.chain, 4).key }));
    // The first prompt, and the second (which teaches where the two part), are keyed by their shared first blocks.
    expect((seen[1] as { key: number }).key).toBe((seen[0] as { key: number }).key);
    const perSession = new Map<number, Set<number>>();
    for (const r of seen.slice(2)) {
      const set = perSession.get(r.session) ?? new Set<number>();
      set.add(r.key);
      perSession.set(r.session, set);
    }
    for (const [session, set] of perSession) expect(set.size, `session ${session}`).toBe(1);
    const distinct = new Set([...perSession.values()].map((set) => [...set][0]));
    expect(distinct.size).toBe(8);
  });

  it("keys a conversation the same on every turn, and learns no branch from it alone or from retries", () => {
    const keys = new ShardKeys();
    const one = conversations(1, 8);
    const got = new Set(one.map((r) => keys.keyOf(r.chain, 4).key));
    keys.keyOf((one[3] as { chain: number[] }).chain, 4);
    expect(got.size).toBe(1);
    expect(keys.size.branches).toBe(0);
  });

  it("finds where raw prompts part when they have no messages to go by (a Mooncake trace's 512-token blocks)", () => {
    // Four conversations under one shared first block (id 0), each growing by a block per turn.
    const sent: [number, number[]][] = [];
    for (let turn = 1; turn <= 5; turn++) for (let c = 0; c < 4; c++) sent.push([c, conversationBlocks(c, turn)]);
    const perConversation = keysPerConversation(sent);
    expect([...perConversation.values()].map((s) => s.size)).toEqual([1, 1, 1, 1]);
    expect(new Set([...perConversation.values()].map((s) => [...s][0])).size).toBe(4);
  });

  it("keeps a conversation's key when two of its prompts part further in (an edited question)", () => {
    // Eight conversations under one shared first block; at turn 2 each also sends its question edited.
    const sent: [number, number[]][] = [];
    for (let turn = 1; turn <= 6; turn++) {
      for (let c = 0; c < 8; c++) {
        const history = conversationBlocks(c, turn);
        sent.push([c, history]);
        if (turn === 2) sent.push([c, [...history.slice(0, -1), 9000 + c]]);
      }
    }
    const perConversation = keysPerConversation(sent);
    // Each conversation carries an eighth of the requests, under a shard's share of 4: where its prompts part does not move it.
    expect([...perConversation.values()].map((s) => s.size)).toEqual([1, 1, 1, 1, 1, 1, 1, 1]);
    expect(new Set([...perConversation.values()].map((s) => [...s][0])).size).toBe(8);
  });

  it("keys the questions on each of many shared prompts by that prompt, and splits a prompt that carries more than a shard's share", () => {
    // Llm-d's b2b-saas shape: 40 groups, each a 6 KB prompt its questions share; one of them also asked a third of all questions.
    const keys = new ShardKeys();
    const ask = (group: number, q: number) =>
      chatFingerprint({ model: "m", messages: [{ role: "system", content: text(`group ${group}`, 6144) }, { role: "user", content: text(`group ${group} question ${q}`, 1200) }] }, opts);
    const perGroup = new Map<number, Set<number>>();
    const hotKeys = new Set<number>();
    for (let round = 0; round < 20; round++) {
      for (let g = 0; g < 40; g++) {
        const key = keys.keyOf(ask(g, round), 4).key;
        if (round >= 2) perGroup.set(g, (perGroup.get(g) ?? new Set()).add(key));
      }
      for (let h = 0; h < 20; h++) {
        const key = keys.keyOf(ask(1000, round * 20 + h), 4).key;
        if (round >= 2) hotKeys.add(key);
      }
    }
    expect([...perGroup.values()].every((s) => s.size === 1)).toBe(true);
    expect(new Set([...perGroup.values()].map((s) => [...s][0])).size).toBe(40);
    // The hot group's questions are keyed apart, so hashing spreads them over the shards.
    expect(hotKeys.size).toBe(18 * 20);
  });

  it("keeps a prefix keyed past while its share wavers about a shard's, and keys by it again once it falls below half", () => {
    // Two apps over 2 shards, each a 6 KB system prompt under 6 conversations; app 0 takes 40%, then 60%, of each 50
    // requests in turn. Its conversations are keyed past its prompt once its share first passes a shard's (phase 1), and stay so.
    const keys = new ShardKeys();
    const histories = [0, 1].map((app) => Array.from({ length: 6 }, (): ChatMessage[] => [{ role: "system", content: text(`app ${app}`, 6144) }]));
    let turn = 0;
    /** The key of app `app`'s next turn, in the conversation whose turn it is. */
    const send = (app: number): { c: number; key: number } => {
      const c = turn++ % 6;
      const h = (histories[app] as ChatMessage[][])[c] as ChatMessage[];
      h.push({ role: "user", content: text(`app ${app} conversation ${c} question ${turn}`, 100) });
      const key = keys.keyOf(chatFingerprint({ model: "m", messages: [...h] }, opts), 2).key;
      h.push({ role: "assistant", content: text(`answer ${turn}`, 100) });
      return { c, key };
    };
    /** 50 requests of which app 0 sends `share`, spread evenly. */
    const phase = (share: number) =>
      Array.from({ length: 50 }, (_, i) => {
        const app = Math.floor((i + 1) * share) > Math.floor(i * share) ? 0 : 1;
        return { app, ...send(app) };
      });
    const perConversation = new Map<string, Set<number>>();
    for (let p = 0; p < 12; p++) {
      for (const { app, c, key } of phase(p % 2 === 0 ? 0.4 : 0.6)) {
        if (p > 1) perConversation.set(`${app}/${c}`, (perConversation.get(`${app}/${c}`) ?? new Set()).add(key));
      }
    }
    expect(perConversation.size).toBe(12);
    expect([...perConversation.values()].every((s) => s.size === 1)).toBe(true);
    expect(new Set([...perConversation.values()].map((s) => [...s][0])).size).toBe(12);

    // Then app 0 sends a tenth: within a few half-lives its share is under a quarter, and all its conversations share one key again.
    const late = Array.from({ length: 16 }, () => phase(0.1)).flat().slice(-200).filter((r) => r.app === 0);
    expect(late.length).toBeGreaterThan(10);
    expect(new Set(late.map((r) => r.key)).size).toBe(1);
  });

  it("splits a prefix at once when it carried the traffic before its prompts parted", () => {
    // A busy isolate's 300 requests, all one prompt (a hot prefix, one key); then questions start to follow it.
    const keys = new ShardKeys();
    const prompt = [1, 2, 3, 4, 5, 6, 7, 8];
    for (let i = 0; i < 300; i++) keys.keyOf(prompt, 4);
    const followed = Array.from({ length: 6 }, (_, q) => keys.keyOf([...prompt, 1000 + q, 2000 + q], 4));
    // The first two teach where they part; from the third on each is keyed by its own question,
    // past the 8 blocks they all share: those are taken to be on every shard.
    expect(followed.slice(0, 2)).toEqual([
      { key: 4, at: 3, spread: 0 },
      { key: 4, at: 3, spread: 0 },
    ]);
    expect(followed.slice(2).map((k) => k.key)).toEqual([1002, 1003, 1004, 1005]);
    expect(followed.slice(2).map((k) => k.spread)).toEqual([8, 8, 8, 8]);
  });

  it("never keys past a prefix over one shard: no share of the requests is more than all of them", () => {
    const keys = new ShardKeys();
    const seen = new Set(conversations(8, 6).map((r) => keys.keyOf(r.chain, 1).key));
    expect(seen.size).toBe(1);
  });

  it("gives prompts identical to their end one key (a hot prefix: bounded loads spread it), and an empty prompt none", () => {
    const keys = new ShardKeys();
    const chain = chatFingerprint({ model: "m", messages: [{ role: "user", content: text("same", 4000) }] }, opts);
    expect(new Set(Array.from({ length: 20 }, () => keys.keyOf([...chain], 4).key)).size).toBe(1);
    expect(keys.keyOf([], 4).key).toBeNaN();
  });

  it("stays bounded however many prompts it sees", () => {
    const keys = new ShardKeys();
    for (let i = 0; i < 20_000; i++) {
      // Pairs that share 6 blocks then part: a branch point each, and two last prompts.
      const base = [i * 10 + 1, i * 10 + 2, i * 10 + 3, i * 10 + 4, i * 10 + 5, i * 10 + 6];
      keys.keyOf([...base, 0.5], 4);
      keys.keyOf([...base, 0.25], 4);
    }
    expect(keys.size.last).toBeLessThanOrEqual(1024);
    expect(keys.size.branches).toBeLessThanOrEqual(4096);
    expect(keys.size.branches).toBeGreaterThan(0);
  });

  it("shares the isolate's bounds with the other groups': the group holding most forgets, one let go gives its room back", () => {
    const bounds = shardKeyBounds();
    const quiet = new ShardKeys(bounds);
    const busy = new ShardKeys(bounds);
    const prompt = (i: number) => [i * 10 + 1, i * 10 + 2, i * 10 + 3, i * 10 + 4, i * 10 + 5];
    for (let i = 0; i < 100; i++) quiet.keyOf(prompt(i), 4);
    for (let i = 1000; i < 6000; i++) busy.keyOf(prompt(i), 4);
    expect(quiet.size.last).toBe(100);
    expect(busy.size.last).toBeGreaterThan(800);
    expect(busy.size.last).toBeLessThanOrEqual(1024 - 100);
    quiet.release();
    for (let i = 6000; i < 8000; i++) busy.keyOf(prompt(i), 4);
    expect(busy.size.last).toBeGreaterThan(1024 - 100);
    expect(busy.size.last).toBeLessThanOrEqual(1024);
  });
});

describe("KeyPlacements: where the prompts under a key went", () => {
  const under = (tail: number[]) => [1, 2, 3, 4, ...tail];

  it("sends a prompt after the placement it shares most with past the key, the newest of equals; none past it, no shard", () => {
    const p = new KeyPlacements();
    // Key 4 at position 3; its own shard 0. A 60-block prompt went to shard 2, then another to shard 0.
    p.placed(4, 3, under(run(1000, 60)), 2, 0);
    p.placed(4, 3, under(run(2000, 60)), 0, 0);
    expect(p.follow(4, 3, under([...run(1000, 30), ...run(5000, 10)]))).toBe(2);
    expect(p.follow(4, 3, under([...run(2000, 1), 7]))).toBe(0);
    expect(p.follow(4, 3, under(run(9000, 40)))).toBe(-1);
    expect(p.follow(5, 3, under(run(1000, 60)))).toBe(-1);
    // The same prompt again, on shard 1: the newest of equals.
    p.placed(4, 3, under(run(1000, 60)), 1, 0);
    expect(p.follow(4, 3, under(run(1000, 61)))).toBe(1);
  });

  it("finds a conversation's last turn under a key many conversations share, each holding one place", () => {
    const p = new KeyPlacements();
    // Conversation A's first turn went to shard 2; then 20 other conversations under the same key,
    // and B's 40 turns, each extending the last, went to shards 1 and 3.
    const a = under(run(1000, 60));
    p.placed(4, 3, a, 2, 0);
    for (let c = 0; c < 20; c++) p.placed(4, 3, under(run(10_000 + 1000 * c, 30)), c % 3 === 0 ? 1 : 3, 0);
    for (let t = 1; t <= 40; t++) p.placed(4, 3, under(run(50_000, 10 * t)), 3, 0);
    // A's next turn goes where its history is; B's next after its last; a new prompt nowhere.
    expect(p.follow(4, 3, [...a, ...run(7000, 20)])).toBe(2);
    expect(p.follow(4, 3, under([...run(50_000, 400), 9]))).toBe(3);
    expect(p.follow(4, 3, under(run(90_000, 30)))).toBe(-1);
    expect(p.placements).toBe(22);
  });

  it("forgets a key whose recent prompts all went home, and stays bounded", () => {
    const p = new KeyPlacements();
    p.placed(4, 3, under(run(1000, 20)), 0, 0);
    expect(p.size).toBe(0);
    p.placed(4, 3, under(run(1000, 20)), 1, 0);
    expect(p.size).toBe(1);
    // Its next turn went home: the turn before is no longer where the conversation is.
    p.placed(4, 3, under(run(1000, 25)), 0, 0);
    expect(p.size).toBe(0);
    expect(p.placements).toBe(0);
    for (let i = 0; i < 100; i++) p.placed(5, 3, under(run(3000 + 100 * i, 20)), 1, 0);
    expect(p.placements).toBeLessThanOrEqual(32);
    for (let k = 0; k < 5000; k++) p.placed(10_000 + k, 3, [1, 2, 3, 10_000 + k, ...run(20_000, 2000)], 1, 0);
    expect(p.size).toBeLessThanOrEqual(1024);
    for (let k = 0; k < 1000; k++) for (let i = 0; i < 32; i++) p.placed(k, 3, [1, 2, 3, k, ...run(100_000 * i, 100)], 1, 0);
    expect(p.placements).toBeLessThanOrEqual(8192);
    expect(p.placements).toBeGreaterThan(4096);
  });
});

describe("shardOrder and boundedOrder: which shard, and where its overflow goes", () => {
  it("gives each shard its weight's share of keys, each key its own order, and leaves out shards of weight 0", () => {
    const weights = [2, 1, 1, 0];
    const first: number[] = [0, 0, 0, 0];
    const seconds = new Set<string>();
    for (let k = 0; k < 40_000; k++) {
      const order = shardOrder(k * 7919 + 0.5 * k, weights);
      expect(order.length).toBe(3);
      expect(new Set(order).size).toBe(3);
      expect(order).not.toContain(3);
      const s = order[0] as number;
      first[s] = (first[s] as number) + 1;
      seconds.add(order.join());
    }
    expect(first.map((n) => n / 40_000)).toEqual([expect.closeTo(0.5, 1), expect.closeTo(0.25, 1), expect.closeTo(0.25, 1), 0]);
    expect(seconds.size).toBe(6);
    expect(shardOrder(12345, weights)).toEqual(shardOrder(12345, weights));
  });

  it("moves only the keys of a shard that leaves", () => {
    for (let k = 0; k < 5_000; k++) {
      const key = k * 104729;
      const all = shardOrder(key, [1, 1, 1, 1]);
      const without = shardOrder(key, [1, 1, 0, 1]);
      expect(without).toEqual(all.filter((s) => s !== 2));
    }
  });

  it("passes over a shard one more request would put well above the mean, and only then", () => {
    const balance = { balanceAbs: 4, balanceRel: 1.5 };
    // Unevenly hashed conversations stay: 4 in flight against a mean of 2.
    expect(boundedOrder([0, 1, 2, 3], [4, 2, 1, 1], [1, 1, 1, 1], balance)).toEqual([0, 1, 2, 3]);
    // A hot key's shard past both bounds: its overflow goes to the next of its order.
    expect(boundedOrder([0, 1, 2, 3], [12, 2, 1, 1], [1, 1, 1, 1], balance)).toEqual([1, 0, 2, 3]);
    expect(boundedOrder([0, 1, 2, 3], [12, 12, 1, 1], [1, 1, 1, 1], balance)).toEqual([2, 0, 1, 3]);
    // Per unit of weight: a shard of 4 servers holds 4 times the requests.
    expect(boundedOrder([0, 1], [12, 1], [4, 1], balance)).toEqual([0, 1]);
  });
});

describe("ShardChoice: an isolate's shard for each prompt", () => {
  const group = (() => {
    const parsed = parseConfig(JSON.stringify({ modelGroups: [{ name: "g", shards: 4, deployments: ids(8).map((id, i) => ({ id, baseUrl: `http://10.0.0.${i + 1}:8000`, model: "m" })) }] }));
    if (!parsed.ok) throw new Error(parsed.error);
    return parsed.config.groups[0] as ResolvedGroup;
  })();

  it("sends each conversation to one shard, spreads conversations over all, and spills a hot prompt as its shard fills", () => {
    const choice = new ShardChoice();
    const shardOf = new Map<number, Set<number>>();
    for (const [i, r] of conversations(32, 4).entries()) {
      const { order } = choice.order(group, r.chain);
      expect(order.length).toBe(4);
      // The first two are keyed by their shared first blocks (ShardKeys learns from them).
      if (i >= 2) shardOf.set(r.session, (shardOf.get(r.session) ?? new Set()).add(order[0] as number));
    }
    expect([...shardOf.values()].every((s) => s.size === 1)).toBe(true);
    expect(new Set([...shardOf.values()].map((s) => [...s][0])).size).toBe(4);

    const hot = chatFingerprint({ model: "m", messages: [{ role: "user", content: text("hot", 3000) }] }, opts);
    const { shards, order } = choice.order(group, hot);
    const home = order[0] as number;
    // The bound is per unit of weight (a shard of 2 backends here), balanceAbs 64 above the
    // group's mean and 1.5 × it: 160 in flight is 80.5 a backend against a mean of 20.1, within it.
    for (let i = 0; i < 160; i++) choice.sent(shards.objectNames[home] as string);
    expect(choice.order(group, hot).order[0]).toBe(home);
    // 200: 100.5 against 25.1, past it.
    for (let i = 0; i < 40; i++) choice.sent(shards.objectNames[home] as string);
    expect(choice.order(group, hot).order[0]).not.toBe(home);
    for (let i = 0; i < 200; i++) choice.ended(shards.objectNames[home] as string);
    expect(choice.order(group, hot).order[0]).toBe(home);
  });

  it("weighs a prefix's share of the requests against the shards taking them, not every shard", () => {
    // Half the shards have nothing to take requests; a system prompt under 40% of the requests is under one of the other two's share.
    const owner = partition(group.deployments.map((d) => d.id), 4);
    const half: ResolvedGroup = { ...group, deployments: group.deployments.map((d, k) => ((owner[k] as number) >= 2 ? { ...d, state: "disabled" } : d)) };
    expect(groupShards(half).active).toBe(2);
    const choice = new ShardChoice();
    const oneOff = (name: string) => choice.order(half, chatFingerprint({ model: "m", messages: [{ role: "user", content: text(`one-off ${name}`, 500) }] }, opts));
    // A busy isolate: one-off prompts, then the conversations among them, 2 of every 5 requests.
    for (let i = 0; i < 300; i++) oneOff(`${i}`);
    const firstShards = new Set<number>();
    let sent = 0;
    for (const r of conversations(8, 40)) {
      const order = choice.order(half, r.chain).order;
      if (sent++ >= 2) firstShards.add(order[0] as number);
      for (let i = sent % 2 === 0 ? 1 : 0; i < 2; i++) oneOff(`${sent} ${i}`);
    }
    // Not split: every conversation is keyed by the system prompt, to one shard.
    expect(firstShards.size).toBe(1);
  });

  it("asks a prompt's shard to pass it on when another would serve it sooner, and sends the key's next prompt where it went", () => {
    const choice = new ShardChoice();
    const prompt = chatFingerprint({ model: "m", messages: [{ role: "user", content: text("conversation", 3000) }] }, opts);
    const plan = choice.order(group, prompt, 0, 100);
    // No shard has told its queue yet: nothing to weigh, no limit.
    expect(plan.spill).toBeUndefined();
    const own = plan.order[0] as number;
    const name = (s: number) => plan.shards.objectNames[s] as string;
    // Its own shard has 5 s of prompt work queued; the others 900, 300 and 600 ms. A block takes 2 ms.
    const waits = [900, 300, 600];
    const others = plan.order.filter((s) => s !== own);
    choice.answered(name(own), { inFlight: 1, waitMs: 5000, blockMs: 2 }, 0);
    others.forEach((s, i) => choice.answered(name(s), { inFlight: 1, waitMs: waits[i] as number, blockMs: 2 }, 0));
    const busy = choice.order(group, prompt, 100, 100);
    // Asked first still (it may hold the prompt's history); the least-queued other next, and the
    // limit is that one's wait with the whole prompt to prefill, plus the fleet's least queue.
    expect(busy.order[0]).toBe(own);
    expect(busy.order[1]).toBe(others[1]);
    expect(busy.spill).toEqual({ overMs: 200 + 100 * 2 + 200, spreadBlocks: 0 });
    // Queues drain with the clock.
    expect(choice.order(group, prompt, 400, 100).spill?.overMs).toBe(0 + 200 + 0);
    // It went to that shard: the key's next prompt goes there first, until one goes home again.
    choice.placed(group, busy, others[1] as number);
    expect(choice.order(group, prompt, 500, 100).order[0]).toBe(others[1]);
    choice.placed(group, busy, own);
    expect(choice.order(group, prompt, 500, 100).order[0]).toBe(own);
  });

  it("takes the next shard to hold a system prompt spread over every shard: neither its prefill nor its copy is counted", () => {
    const choice = new ShardChoice();
    const [a, b, c] = conversations(3, 1).map((r) => r.chain) as [number[], number[], number[]];
    // The first two teach where conversations part; the third is keyed past what they share.
    let system = 0;
    while (a[system] === b[system]) system++;
    expect(system).toBeGreaterThan(50);
    choice.order(group, a, 0);
    choice.order(group, b, 0);
    const plan = choice.order(group, c, 0);
    const name = (s: number) => plan.shards.objectNames[s] as string;
    // Its shard has 5 s of prompt work queued, the others 300 ms; a block takes 2 ms.
    plan.order.forEach((s, i) => choice.answered(name(s), { inFlight: 1, waitMs: i === 0 ? 5000 : 300, blockMs: 2 }, 0));
    // The next shard prefills only the blocks past the system prompt; the object is told not to price copying it.
    expect(choice.order(group, c, 0).spill).toEqual({ overMs: 300 + (c.length - system) * 2 + 300, spreadBlocks: system });
  });

  it("asks first the shard that holds what a prompt shares past its key, not where the key's last prompt went", () => {
    const choice = new ShardChoice();
    // Other traffic, so the prefix the two prompts below share carries less than a shard's share and keys them both.
    for (let i = 0; i < 40; i++) choice.order(group, [100 + i, 200 + i, 300 + i, 400 + i, 500 + i], 0);
    const home = [1, 2, 3, 4, ...run(1000, 100)];
    const away = [1, 2, 3, 4, ...run(2000, 100)];
    const first = choice.order(group, home, 0);
    const own = first.own;
    choice.placed(group, first, own);
    const second = choice.order(group, away, 0);
    expect(second.key).toBe(first.key);
    // The second went elsewhere (passed on for a queue, say).
    const elsewhere = (own + 1) % 4;
    choice.placed(group, second, elsewhere);
    // The first's next turn goes where the first is; the second's where the second is; a third prompt under the key, to its own shard.
    expect(choice.order(group, [...home, 7, 8], 0).order[0]).toBe(own);
    expect(choice.order(group, [...away, 7, 8], 0).order[0]).toBe(elsewhere);
    expect(choice.order(group, [1, 2, 3, 4, 9, 9], 0).order[0]).toBe(own);
  });

  it("weighs a shard by the other isolates' requests it last reported only while that report is fresh", () => {
    const choice = new ShardChoice();
    const hot = chatFingerprint({ model: "m", messages: [{ role: "user", content: text("hot", 3000) }] }, opts);
    const { shards, order } = choice.order(group, hot, 0);
    const home = shards.objectNames[order[0] as number] as string;
    // One request of this isolate's, answered by an object busy with 200 of other isolates'.
    choice.sent(home);
    choice.answered(home, { inFlight: 201 }, 0);
    expect(choice.order(group, hot, 500).order[0]).not.toBe(order[0]);
    // Its own request ended and a second passed: the report is stale, the shard takes the key again.
    choice.ended(home);
    expect(choice.order(group, hot, 1500).order[0]).toBe(order[0]);
  });

  it("stays bounded however many sharded groups it serves, and lets go of a group no longer sharded in the fleet", () => {
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const heldMb = (from: number) => (gc(), (process.memoryUsage().heapUsed - from) / 2 ** 20);
    const groups = Array.from({ length: 32 }, (_, g): ResolvedGroup => ({ ...group, name: `group-${g}` }));
    // Conversations of 608 blocks under a shared opening, each placed on the shard after its own: a
    // last prompt (4 KB) and a placement per conversation. One group's tables full hold ~5 MB.
    let h = 1e9;
    const converse = (choice: ShardChoice, g: ResolvedGroup, conversations: number) => {
      for (let c = 0; c < conversations; c++) {
        const chain = [11, 12, 13, 14, 15, 16, 17, 18];
        for (let i = 0; i < 600; i++) chain.push(h++ * 1.000001);
        const plan = choice.order(g, chain, 0);
        choice.placed(g, plan, (plan.own + 1) % 4);
      }
    };
    gc();
    const before = process.memoryUsage().heapUsed;
    const choice = new ShardChoice();
    for (const g of groups) converse(choice, g, 1200);
    // 144 MB before the bounds were the isolate's (4.5 MB a group): past a Worker's 128 MB.
    expect(heldMb(before)).toBeLessThan(12);
    // The fleet read again: every group but the first gone, or down to one shard.
    choice.keepOnly([groups[0] as ResolvedGroup, ...groups.slice(1, 8).map((g) => ({ ...g, shards: 1 }))]);
    const kept = heldMb(before);
    expect(kept).toBeLessThan(1.5);
    // The bounds count what went: the group left takes them up again, and no more.
    converse(choice, groups[0] as ResolvedGroup, 2400);
    expect(heldMb(before)).toBeGreaterThan(kept + 3);
    expect(heldMb(before)).toBeLessThan(12);
    choice.keepOnly([]);
    expect(heldMb(before)).toBeLessThan(1.5);
  });
});

describe("merging a sharded group's answers", () => {
  const status = (group: string, backends: string[], leases: number): GroupStatus => ({
    group,
    strategy: "prefix-aware",
    versions: ["v2", "v1"],
    rev: leases,
    leases,
    calls: { route: 10 * leases, release: leases },
    tenants: { keys: 1, pendingUsageRows: 2 },
    restored: { breakers: 0, affinityBlocks: 5, leases: 0 },
    backends: backends.map((id) => snapshot(id)),
  });
  /** A backend as an object lists it: nothing done yet, but for `fields`; what it is (breaker, what it learned) left out. */
  const snapshot = (id: string, fields: Partial<GroupStatus["backends"][number]> = {}): GroupStatus["backends"][number] =>
    ({ id, takesRequests: true, inFlight: 0, completed: 0, failed: 0, rejected: 0, aborted: 0, expired: 0, usage: { prompt: 0, cached: 0 }, prefillDebtBlocks: 0, ...fields }) as GroupStatus["backends"][number];

  it("lists every shard's backends under the group and adds up the counts", () => {
    const merged = mergeStatus([status("g", ["a", "b"], 3), status("g", ["c"], 4)]);
    expect(merged).toMatchObject({ group: "g", leases: 7, rev: 4, calls: { route: 70, release: 7 }, tenants: { keys: 2, pendingUsageRows: 4 }, restored: { affinityBlocks: 10 }, versions: ["v2", "v1"] });
    expect(merged.backends.map((b) => b.id)).toEqual(["a", "b", "c"]);
    const one = status("g", ["a"], 1);
    expect(mergeStatus([one])).toEqual(one);
  });

  it("lists a deployment one object has at two addresses once, with what both have in flight: drained only when neither has any", () => {
    const one = status("g", ["d", "d", "e"], 1);
    // The newest version's entry first: d drained at its new address, a request still on its old one.
    one.backends = one.backends.map((x, i) => ({ ...x, takesRequests: false, inFlight: i === 1 ? 1 : 0 }));
    const merged = mergeStatus([one]);
    expect(merged.backends.map((x) => [x.id, x.inFlight])).toEqual([
      ["d", 1],
      ["e", 0],
    ]);
  });

  /** A group's answers as a scrape reads them: the group's own object's first, then its shards' in turn (`shards` of them now). */
  const mergeMetrics = (answers: GroupMetrics[], objects = answers.map((_, i) => shardObjectName("g", i)), shards = objects.length) => scrapedGroup("g", answers, objects, objects.length > 1 || shards > 1, shards);

  it("keeps a key's counters per object that counted it: a series falls only with its own object, to 0", () => {
    const m = (keys: GroupMetrics["keys"], refused: number): GroupMetrics => ({ group: "g", backends: [], keys, refusals: { "no-backend": refused, "at-capacity": 1 } });
    const k1 = { id: "k1", requests: 2, tokens: { prompt: 10, completion: 5, cached: 4 }, estimated: 1, limitHits: { rpm: 1 } };
    const families = metricFamilies([
      mergeMetrics([
        m([k1], 1),
        m(
          [
            { ...k1, requests: 3 },
            { id: "k2", requests: 1, tokens: { prompt: 1, completion: 1, cached: 1 }, estimated: 0, limitHits: {} },
          ],
          2,
        ),
      ]),
    ]);
    const samples = (name: string) => families.find((f) => f.name === name)?.samples;
    expect(samples("kvgate_key_requests_total")).toEqual([
      { labels: { group: "g", key: "k1", shard: "0" }, value: 2 },
      { labels: { group: "g", key: "k1", shard: "1" }, value: 3 },
      { labels: { group: "g", key: "k2", shard: "1" }, value: 1 },
    ]);
    expect(samples("kvgate_route_refusals_total")).toEqual([
      { labels: { group: "g", shard: "0", refused: "no-backend" }, value: 1 },
      { labels: { group: "g", shard: "0", refused: "at-capacity" }, value: 1 },
      { labels: { group: "g", shard: "1", refused: "no-backend" }, value: 2 },
      { labels: { group: "g", shard: "1", refused: "at-capacity" }, value: 1 },
    ]);
  });

  it("names a sharded group's own object's series shard=\"0\" whether or not its other objects answered, and a group of one object's by no shard", () => {
    const m: GroupMetrics = { group: "g", backends: [], keys: [{ id: "k", requests: 2, tokens: { prompt: 1, completion: 1, cached: 0 }, limitHits: {} }], refusals: { "no-backend": 0, "at-capacity": 0 } };
    const labelsOf = (sharded: boolean) => metricFamilies([scrapedGroup("g", [m], ["g"], sharded, sharded ? 2 : 1)]).find((f) => f.name === "kvgate_key_requests_total")?.samples.map((x) => x.labels);
    // Its shard 1's object did not answer this scrape: shard 0's series keep their name.
    expect(labelsOf(true)).toEqual([{ group: "g", key: "k", shard: "0" }]);
    expect(labelsOf(false)).toEqual([{ group: "g", key: "k" }]);
  });

  it("lists a backend that moved shards once: the shard that routes to it, with the requests the other still has", () => {
    const a = status("g", ["a", "b"], 3);
    const b = status("g", ["b", "c"], 1);
    a.backends = a.backends.map((x) => ({ ...x, takesRequests: x.id === "a", inFlight: 1 }));
    b.backends = b.backends.map((x) => ({ ...x, takesRequests: true, inFlight: 2 }));
    const merged = mergeStatus([a, b]);
    expect(merged.backends.map((x) => [x.id, x.takesRequests, x.inFlight])).toEqual([
      ["a", true, 1],
      ["b", true, 3],
      ["c", true, 2],
    ]);
  });

  it("adds up the counts of a backend two shards list, as /metrics does; what it is now is the shard's that routes to it", () => {
    type Snapshot = GroupStatus["backends"][number];
    const did = (n: number): Partial<Snapshot> => ({ inFlight: n, completed: 10 * n, failed: n, rejected: 2 * n, aborted: 3 * n, expired: 4 * n, usage: { prompt: 100 * n, cached: 50 * n }, prefillDebtBlocks: 5 * n, prefixCapacity: 64 });
    // The shard it left first (the newest version's order), still finishing 2 requests; the shard it moved to routes to it.
    const left = status("g", [], 3);
    left.backends = [snapshot("b", { ...did(2), takesRequests: false, breaker: { state: "open" } as Snapshot["breaker"], ttftEwmaMs: 900, prefixBlocks: 40 })];
    const now = status("g", [], 1);
    now.backends = [snapshot("b", { ...did(1), breaker: { state: "closed" } as Snapshot["breaker"], ttftEwmaMs: 80, prefixBlocks: 3 })];
    const [merged] = mergeStatus([left, now]).backends;
    expect(merged).toMatchObject({ takesRequests: true, inFlight: 3, completed: 30, failed: 3, rejected: 6, aborted: 9, expired: 12, usage: { prompt: 300, cached: 150 }, prefillDebtBlocks: 15 });
    expect(merged).toMatchObject({ breaker: { state: "closed" }, ttftEwmaMs: 80, prefixBlocks: 3, prefixCapacity: 64 });
  });

  /** A backend "b" as an object lists it, with `ok` requests; `current`: that object routes for it. */
  const hist = (count: number) => ({ bounds: [10, 100], cumulative: [count, count], sum: 5 * count, count });
  const backend = (inFlight: number, ok: number, breaker: "closed" | "open", current = true): GroupMetrics["backends"][number] =>
    ({
      id: "b",
      current,
      inFlight,
      breaker,
      breakerTransitions: { closed: 0, "half-open": 0, open: breaker === "open" ? 1 : 0 },
      outcomes: { ok, "upstream-error": 0, rejected: 0, "client-abort": 0, "rate-limited": 0, expired: 0 },
      reasons: { "prefix-hit": ok },
      ttft: hist(ok),
      duration: hist(ok),
      tokens: { prompt: ok, completion: ok, cached: 0, predictedCached: 0, leases: ok },
      prefix: { entries: 10, capacity: 100, bytes: 400 },
      learned: { charsPerToken: ok, kvCapacityBlocks: 100, prefillTokensPerSec: 1000, configured: { kvCapacityBlocks: 100, prefillTokensPerSec: 1000 }, reports: { usage: ok, cached: 0 }, capacitySteps: 0 },
    }) as GroupMetrics["backends"][number];

  it("gives a backend counted by two shards one set of series: counts added, the worse breaker", () => {
    const merged = mergeMetrics([
      { group: "g", backends: [backend(1, 7, "open")], keys: [], refusals: { "no-backend": 0, "at-capacity": 0 } },
      { group: "g", backends: [backend(2, 3, "closed")], keys: [], refusals: { "no-backend": 0, "at-capacity": 0 } },
    ]);
    expect(merged.backends.length).toBe(1);
    expect(merged.counts.map((c) => [c.shard, c.metrics.backends[0]?.outcomes.ok])).toEqual([
      [0, 7],
      [1, 3],
    ]);
    expect(merged.backends[0]).toMatchObject({ inFlight: 3, breaker: "open", outcomes: { ok: 10 }, reasons: { "prefix-hit": 10 }, ttft: { cumulative: [10, 10], count: 10, sum: 50 }, prefix: { entries: 20 }, learned: { charsPerToken: 7, reports: { usage: 10 } } });
  });

  it("takes a backend's breaker, prefix set and lessons from the object that routes for it, and only counts from one the group gave up", () => {
    const part = (b: GroupMetrics["backends"][number]): GroupMetrics => ({ group: "g", backends: [b], keys: [], refusals: { "no-backend": 0, "at-capacity": 0 } });
    // The retired shard's entry (after the group's own, as the Worker asks them): its breaker opened before it was given up, and stays so.
    const merged = mergeMetrics([part(backend(0, 3, "closed")), part(backend(1, 7, "open", false))]);
    expect(merged.backends[0]).toMatchObject({ current: true, inFlight: 1, breaker: "closed", outcomes: { ok: 10 }, ttft: { count: 10 }, prefix: { entries: 10 }, learned: { charsPerToken: 3, reports: { usage: 10 } } });
    // An object of the release before (mid-deploy) names no `current`: it routes for what it lists, and a retired one's stale view still loses.
    const { current: _, ...older } = backend(0, 3, "closed");
    const skewed = mergeMetrics([part(older as GroupMetrics["backends"][number]), part(backend(1, 7, "open", false))]);
    expect(skewed.backends[0]).toMatchObject({ breaker: "closed", outcomes: { ok: 10 }, learned: { charsPerToken: 3 } });
  });

  it("counts what a given-up shard's object handed over once: its own answer while it still gives one, else the copy the group's own object carries", () => {
    const refusals = (n: number) => ({ "no-backend": n, "at-capacity": 0 });
    const retired: GroupMetrics = { group: "g", backends: [backend(0, 7, "closed", false)], keys: [{ id: "k", requests: 7, tokens: { prompt: 7, completion: 7, cached: 0 }, limitHits: {} }], refusals: refusals(2) };
    const own = (handed: GroupMetrics): GroupMetrics => ({ group: "g", backends: [backend(1, 3, "closed")], keys: [], refusals: refusals(1), handedOver: [{ object: "g\u001f1", metrics: handed }] });
    // Asked while the handed copy is older (it answered since with more: a later hand-over would carry them).
    const both = mergeMetrics([own({ ...retired, refusals: refusals(1) }), retired], ["g", "g\u001f1"], 1);
    // Asked no more, or not answering: the copy.
    const alone = mergeMetrics([own(retired)], ["g"], 1);
    for (const m of [both, alone]) {
      // Its counters' series name their shards, the group's own object's "0", as when it had them.
      expect(m.sharded).toBe(true);
      expect(m.backends[0]).toMatchObject({ inFlight: 1, outcomes: { ok: 10 } });
      expect(m.counts.map((c) => [c.shard, c.metrics.keys, c.metrics.refusals, c.metrics.handedOver])).toEqual([
        [0, [], refusals(1), undefined],
        [1, retired.keys, refusals(2), undefined],
      ]);
    }
  });

  it("uses no handed-over copy for an object that is one of the group's shards again: a scrape it does not answer leaves its series out, none falls", () => {
    const refusals = (n: number) => ({ "no-backend": n, "at-capacity": 0 });
    // Shards 2 then 1: shard 1's object handed its counts over. Shards 2 again: it counts on from there (10 requests since).
    const handed: GroupMetrics = { group: "g", backends: [backend(0, 7, "closed", false)], keys: [{ id: "k", requests: 7, tokens: { prompt: 7, completion: 7, cached: 0 }, limitHits: {} }], refusals: refusals(2) };
    const own: GroupMetrics = { group: "g", backends: [backend(1, 3, "closed")], keys: [], refusals: refusals(1), handedOver: [{ object: "g\u001f1", metrics: handed }] };
    const now: GroupMetrics = { ...handed, backends: [backend(0, 17, "closed")], keys: [{ id: "k", requests: 17, tokens: { prompt: 17, completion: 17, cached: 0 }, limitHits: {} }] };
    const shardOne = (m: ReturnType<typeof mergeMetrics>) => m.counts.filter((c) => c.shard === 1).map((c) => [c.metrics.backends[0]?.outcomes.ok, c.metrics.keys[0]?.requests]);
    expect(shardOne(mergeMetrics([own, now], ["g", "g\u001f1"], 2))).toEqual([[17, 17]]);
    // It does not answer this scrape: its series are missing (the group reported down), not set back to the copy's 7.
    const missing = mergeMetrics([own], ["g"], 2);
    expect(shardOne(missing)).toEqual([]);
    expect([missing.sharded, missing.backends[0]?.outcomes.ok]).toEqual([true, 3]);
  });

  it("gives a deployment at two addresses in a sharded group its new address's breaker and prefix set, as one object does", () => {
    const hist = { bounds: [10], cumulative: [1], sum: 1, count: 1 };
    const entry = (id: string, breaker: "closed" | "open", entries: number, usage: number): GroupMetrics["backends"][number] =>
      ({
        id,
        current: true,
        inFlight: 1,
        breaker,
        breakerTransitions: { closed: 0, "half-open": 0, open: 0 },
        outcomes: { ok: 1, "upstream-error": 0, rejected: 0, "client-abort": 0, "rate-limited": 0, expired: 0 },
        reasons: {},
        ttft: hist,
        duration: hist,
        tokens: { prompt: 1, completion: 1, cached: 0, predictedCached: 0, leases: 1 },
        prefix: { entries, capacity: 100, bytes: 4 * entries },
        learned: { charsPerToken: usage, kvCapacityBlocks: 100, prefillTokensPerSec: 1000, configured: { kvCapacityBlocks: 100, prefillTokensPerSec: 1000 }, reports: { usage, cached: 0 }, capacitySteps: 0 },
      }) as GroupMetrics["backends"][number];
    const shard = (backends: GroupMetrics["backends"]): GroupMetrics => ({ group: "g", backends, keys: [], refusals: { "no-backend": 0, "at-capacity": 0 } });
    // d restarted at a new address: its shard lists the new entry first, the old one (breaker open) after.
    const restarted = [entry("d", "closed", 3, 1), entry("d", "open", 90, 40)];
    const alone = mergeMetrics([shard(restarted)]);
    const sharded = mergeMetrics([shard(restarted), shard([entry("e", "closed", 5, 2)])]);
    const d = sharded.backends.find((b) => b.id === "d");
    expect(d).toEqual(alone.backends[0]);
    expect(d).toMatchObject({ breaker: "closed", prefix: { entries: 3, capacity: 100 }, inFlight: 2, outcomes: { ok: 2 }, learned: { charsPerToken: 1, reports: { usage: 41 } } });
  });

  it("interleaves the shards' decisions newest first", () => {
    const d = (at: string): DecisionView => ({ at, backend: "a", reason: "prefix-hit", matched: 1, total: 2, outcome: null, ttft_ms: null });
    const merged = mergeDecisions([[d("2026-11-24T00:00:03Z"), d("2026-11-24T00:00:01Z")], [d("2026-11-24T00:00:02Z")]]);
    expect(merged.map((x) => x.at)).toEqual(["2026-11-24T00:00:03Z", "2026-11-24T00:00:02Z"]);
  });
});
