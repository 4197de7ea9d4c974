import { evictDurableObject, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it, vi } from "vitest";
import type { ModelGroup } from "../../durable-objects/model-group.ts";
import type { IssuedKeyView, UsageView } from "../../src/tenants/admin-api.ts";
import type { Spent, TenantsRpc, UsageRow } from "../../src/tenants/protocol.ts";
import { admin, ok } from "./admin.ts";
import { chat, conversation, EVENTUALLY, expectIdle } from "./gateway.ts";
import type { Tenants } from "../../durable-objects/tenants.ts";
import { DAY_MS, tenants } from "./tenants.ts";

/**
 * A routing object's virtual-key usage while the tenants object cannot take it (overloaded, or
 * reset by a deploy), when the routing object itself restarts before it is back: an eviction, a
 * crash, or the deploy that mends the outage. The runtime cannot be made to fail a Durable Object
 * call on purpose: the object's binding is a stand-in whose record throws as the runtime's does
 * (as in key-store-outage.test.ts), until the object restarts with its real one.
 */

const GROUP = "usage-outage";

/** What a test sets and reads of a routing object: its bindings, its storage, and when its usage is next due. */
interface Inside {
  env: Record<string, unknown>;
  ctx: DurableObjectState;
  usageDueAt: number | null;
}

const overloaded = () => Object.assign(new Error("Durable Object is overloaded. Too many requests queued."), { overloaded: true });

/**
 * Makes the object's sends of usage fail from now on; answers how many have. The first, with
 * `firstArrives`, reaches the tenants object and only its answer is lost.
 */
async function tenantsDown(stub: DurableObjectStub, firstArrives = false): Promise<() => number> {
  let failed = 0;
  await recordWith(stub, async (...call) => {
    if (failed++ === 0 && firstArrives) await tenants().record(...call);
    throw overloaded();
  });
  return () => failed;
}

/** The object's tenants object, from now on until it restarts, is one whose record is `record`. */
async function recordWith(stub: DurableObjectStub, record: (...call: Parameters<TenantsRpc["record"]>) => Promise<Record<string, Spent>>): Promise<void> {
  await runInDurableObject(stub, (o) => {
    const inside = o as unknown as Inside;
    inside.env = { ...inside.env, TENANTS: { getByName: () => ({ record }) } };
  });
}

/** Sends `n` non-streamed requests with the key; answers the tokens their answers say they used. */
async function requests(key: string, n: number, used = { prompt: 0, completion: 0 }): Promise<{ prompt: number; completion: number }> {
  for (let i = 0; i < n; i++) {
    const res = await chat(GROUP, conversation(`outage ${i}`), { max_tokens: 5 + i }, { headers: { authorization: `Bearer ${key}` } });
    const body = (await res.json()) as { usage: { prompt_tokens: number; completion_tokens: number } };
    expect(res.status).toBe(200);
    used.prompt += body.usage.prompt_tokens;
    used.completion += body.usage.completion_tokens;
  }
  await expectIdle(GROUP);
  return used;
}

/** Once the requests ended: a send that failed after them. */
async function aFailureAfter(failures: () => number): Promise<void> {
  const before = failures();
  await vi.waitFor(() => expect(failures()).toBeGreaterThan(before), EVENTUALLY);
}

/**
 * A new key's 2 requests, a failed send, its 3rd request, another failed send: the batch of the
 * first two goes again, and the third's row waits behind it. With `firstArrives`, that batch is
 * stored the first time, only its answer lost.
 */
async function throughFailures(name: string, firstArrives = false) {
  const made = await madeKey(name);
  const stub = env.MODEL_GROUP.getByName(GROUP);
  const failures = await tenantsDown(stub, firstArrives);
  const used = await requests(made.key, 2);
  await aFailureAfter(failures);
  await requests(made.key, 1, used);
  await aFailureAfter(failures);
  return { made, stub, used };
}

const madeKey = (name: string) => ok<IssuedKeyView>(admin("/admin/v1/keys", { method: "POST", json: { name } }), 201);
const counted = (id: string) => ok<UsageView>(admin(`/admin/v1/usage?key=${id}`));
const savedUsage = (stub: DurableObjectStub) => runInDurableObject(stub, async (_o, state) => [...(await state.storage.list({ prefix: "usage:" })).keys()]);
/** The rows of usage the object holds in storage. */
const savedRows = (stub: DurableObjectStub) => runInDurableObject(stub, async (_o, state) => [...(await state.storage.list<{ rows: UsageRow[] }>({ prefix: "usage:" })).values()].flatMap((part) => part.rows));
/** The object's next send of usage, now rather than when its alarm comes. */
const sendNow = (stub: DurableObjectStub) =>
  runInDurableObject(stub, async (o) => {
    (o as unknown as Inside).usageDueAt = 0;
    await (o as unknown as ModelGroup).alarm();
  });

describe("a routing object's usage of virtual keys", () => {
  it("is sent without a write to storage while the tenants object takes it", async () => {
    const made = await madeKey("no writes");
    const stub = env.MODEL_GROUP.getByName(GROUP);
    const written: string[] = [];
    await runInDurableObject(stub, (o) => {
      const storage = (o as unknown as Inside).ctx.storage;
      const put = storage.put.bind(storage) as (...args: unknown[]) => Promise<void>;
      storage.put = ((first: string | Record<string, unknown>, ...rest: unknown[]) => {
        written.push(...(typeof first === "string" ? [first] : Object.keys(first)));
        return put(first, ...rest);
      }) as typeof storage.put;
      // The object writes through this very storage: the spy sees what it writes.
      expect((o as unknown as Inside).ctx.storage.put).toBe(storage.put);
    });
    const used = await requests(made.key, 3);
    await vi.waitFor(async () => expect(await counted(made.id)).toMatchObject({ requests: 3, prompt_tokens: used.prompt, completion_tokens: used.completion }), EVENTUALLY);
    expect(written.filter((k) => k.startsWith("usage:"))).toEqual([]);
  });

  it("that a send could not deliver is sent by the object restarted before the tenants object was back: every request and token counted", async () => {
    const made = await madeKey("outage");
    const stub = env.MODEL_GROUP.getByName(GROUP);
    const failures = await tenantsDown(stub);
    const used = await requests(made.key, 3);
    await aFailureAfter(failures);
    await evictDurableObject(stub);
    // The new instance has the real binding: the tenants object is back.
    await vi.waitFor(async () => expect(await counted(made.id)).toMatchObject({ requests: 3, prompt_tokens: used.prompt, completion_tokens: used.completion }), EVENTUALLY);
    // Once the tenants object took it, nothing of it is kept.
    await vi.waitFor(async () => expect(await savedUsage(stub)).toEqual([]), EVENTUALLY);
  }, 30_000);

  it("is counted once when a batch arrived but its answer was lost, and rows that waited behind it through more failures follow it", async () => {
    const { made, stub, used } = await throughFailures("answer lost", true);
    // The first batch arrived: the tenants object has it, the routing object does not know.
    expect(await counted(made.id)).toMatchObject({ requests: 2 });
    await evictDurableObject(stub);
    await vi.waitFor(async () => expect(await savedUsage(stub)).toEqual([]), EVENTUALLY);
    expect(await counted(made.id)).toMatchObject({ requests: 3, prompt_tokens: used.prompt, completion_tokens: used.completion });
  }, 40_000);

  it("is counted once when a batch that arrived, its answer lost, is sent again days later: the tenants object still knows its sender's last batch", async () => {
    const { made, stub, used } = await throughFailures("answer lost, sent late", true);
    expect(await counted(made.id)).toMatchObject({ requests: 2 });
    // Two days pass before the routing object is back (a rollback to a release that sends under another name, an outage): the tenants object's daily prune runs.
    await runInDurableObject(tenants(), (o: Tenants, state) => {
      state.storage.sql.exec("UPDATE senders SET at = ?", Date.now() - 2 * DAY_MS);
      o.alarm();
    });
    await evictDurableObject(stub);
    await vi.waitFor(async () => expect(await savedUsage(stub)).toEqual([]), EVENTUALLY);
    expect(await counted(made.id)).toMatchObject({ requests: 3, prompt_tokens: used.prompt, completion_tokens: used.completion });
  }, 40_000);

  it("is counted once when the object dies with a batch of what waited delivered and unanswered, after the tenants object came back", async () => {
    const { made, stub, used } = await throughFailures("dies sending");
    // Back: the failed batch is answered; the next, of the row that waited behind it, arrives and its answer never comes.
    let calls = 0;
    await recordWith(stub, async (...call) => {
      const answer = await tenants().record(...call);
      return ++calls === 1 ? answer : new Promise<never>(() => {});
    });
    await sendNow(stub);
    await vi.waitFor(() => expect(calls).toBe(2), EVENTUALLY);
    expect(await counted(made.id)).toMatchObject({ requests: 3 });
    // It dies there (a crash, or the runtime resetting it), before the send's end.
    await runInDurableObject(stub, (_o, state) => state.abort("dies sending")).catch(() => undefined);
    const restarted = env.MODEL_GROUP.getByName(GROUP);
    await vi.waitFor(async () => expect(await savedUsage(restarted)).toEqual([]), EVENTUALLY);
    expect(await counted(made.id)).toMatchObject({ requests: 3, prompt_tokens: used.prompt, completion_tokens: used.completion });
  }, 40_000);

  it("is saved as one copy, in place of the last, that does not grow with the outage: however many sends fail, the failed batch and a row per key, day, model and backend", async () => {
    const keys = [await madeKey("long outage a"), await madeKey("long outage b")];
    const stub = env.MODEL_GROUP.getByName(GROUP);
    await tenantsDown(stub);
    let made = 0;
    const sizes: number[] = [];
    for (let round = 0; round < 12; round++) {
      for (const k of keys) await requests(k.key, 1);
      made += keys.length;
      await sendNow(stub);
      const rows = await savedRows(stub);
      // All that finished is saved, and no more than twice the two keys' rows: those of the batch that failed, and those that waited behind it.
      expect(rows.reduce((n, r) => n + r.requests, 0)).toBe(made);
      sizes.push(rows.length);
    }
    expect(Math.max(...sizes)).toBeLessThanOrEqual(2 * keys.length);
    // A part for the batch, one for the rows behind it: the same keys, however often a part was written.
    expect(await savedUsage(stub)).toEqual(["usage:000000", "usage:000001"]);
    await evictDurableObject(stub);
    await vi.waitFor(async () => expect(await savedUsage(stub)).toEqual([]), EVENTUALLY);
    for (const k of keys) expect(await counted(k.id)).toMatchObject({ requests: 12 });
  }, 60_000);
});
