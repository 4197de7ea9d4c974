import { virtualGroup } from "./virtual/point.ts";
import { replayVirtual } from "./virtual/replay.ts";
import { ShardChoice } from "../src/sharding/shard-choice.ts";
import { profileOf, resolveFleetOptions } from "./fleet/options.ts";
import { OPEN_LOOP_SETUPS, scheduleOf } from "./routing/open-loop-matrix.ts";
import { MODEL } from "./routing/matrix.ts";
import { writeFileSync } from "node:fs";

type Plan = { key: number; own: number; order: number[]; spill?: { overMs: number; spreadBlocks: number }; blocks: number; placed?: number; moved?: boolean };
const plans: Plan[] = [];
const origPlaced = ShardChoice.prototype.placed;
ShardChoice.prototype.placed = function (this: ShardChoice, g, plan, shard) {
  const last = plans[plans.length - 1] as Plan;
  if (last.key === plan.key) last.placed = shard;
  return origPlaced.call(this, g, plan, shard);
};
const origOrder = ShardChoice.prototype.order;
ShardChoice.prototype.order = function (this: ShardChoice, ...a: Parameters<ShardChoice["order"]>) {
  const plan = origOrder.apply(this, a);
  plans.push({ key: plan.key, own: plan.own, order: [...plan.order], spill: plan.spill, blocks: a[3] ?? 0, moved: plan.order[0] !== plan.own });
  return plan;
};
const seed = Number(process.argv[2] ?? 6);
const shards = Number(process.argv[3] ?? 2);
const jitter = Number(process.argv[4] ?? 1);
const setup = OPEN_LOOP_SETUPS.mooncake;
const schedule = scheduleOf({ setup, seed, quick: false });
const result: Record<number, unknown> = {};
for (const n of [1, shards]) {
  plans.length = 0;
  const r = replayVirtual({
    trace: schedule.trace, arrivalsMs: schedule.arrivalsMs, group: virtualGroup("prefix-aware", setup, n),
    profile: profileOf(resolveFleetOptions({ preset: setup.preset, workers: 4, timeScale: setup.timeScale, maxModelLen: setup.maxModelLen })),
    model: MODEL, timeoutMs: setup.timeoutMs, seed: jitter, hopMs: 20, maxInFlight: 1024,
  });
  const reqs = r.requests.map((q) => ({ i: q.index, s: q.session, t: q.turn, p: q.promptTokens, c: q.cachedTokens, b: q.backend, why: q.reason, sent: q.sentMs, ttft: q.ttftMs, err: q.error }));
  const tot = reqs.reduce((a, q) => a + (q.c ?? 0), 0), all = reqs.reduce((a, q) => a + (q.p ?? 0), 0);
  console.log(n, "cached", tot, "of", all, tot / all, "plans", plans.length);
  result[n] = { reqs, plans: [...plans] };
}
writeFileSync(`/tmp/s43/probe-${seed}-${shards}-${jitter}.json`, JSON.stringify(result));
