import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import type { Tenants } from "../../durable-objects/tenants.ts";
import type { KeyRecord, UsageRow } from "../../src/tenants/protocol.ts";
import { TENANTS_NAME } from "../../src/tenants/tenants-name.ts";

/** The gateway's one tenants object, as the Worker and the routing objects reach it. */
export const tenants = () => env.TENANTS.getByName(TENANTS_NAME);

export const DAY_MS = 86_400_000;

/**
 * Keys' ids in the list's order: oldest first, keys made in the same millisecond by id. Keys made
 * back to back can share a millisecond, so the order they were made in is not the list's.
 */
export function inListOrder(records: readonly KeyRecord[]): string[] {
  return [...records].sort((a, b) => a.createdAt - b.createdAt || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)).map((r) => r.id);
}

/** A row of usage as a routing object sends it: one request, half the prompt cached, a made-up cost, unless `extra` says. */
export function usageRow(key: string, day: string, model: string, backend: string, prompt: number, completion: number, extra: Partial<UsageRow> = {}): UsageRow {
  return { key, day, model, backend, promptTokens: prompt, completionTokens: completion, cachedTokens: Math.floor(prompt / 2), requests: 1, costMicros: prompt + 2 * completion, ...extra };
}

/** Rows SQLite read while `f` ran in the object: every statement's cursor, counted once it is read. */
export function rowsReadBy(stub: DurableObjectStub<Tenants>, f: (o: Tenants) => unknown): Promise<number> {
  return rowsBy(stub, f, "rowsRead");
}

/** Rows SQLite wrote while `f` ran in the object, a trigger's writes included. */
export function rowsWrittenBy(stub: DurableObjectStub<Tenants>, f: (o: Tenants) => unknown): Promise<number> {
  return rowsBy(stub, f, "rowsWritten");
}

function rowsBy(stub: DurableObjectStub<Tenants>, f: (o: Tenants) => unknown, counted: "rowsRead" | "rowsWritten"): Promise<number> {
  return runInDurableObject(stub, async (o: Tenants, state) => {
    const sql = state.storage.sql;
    const exec = sql.exec;
    const cursors: SqlStorageCursor<Record<string, SqlStorageValue>>[] = [];
    sql.exec = ((query: string, ...bindings: unknown[]) => {
      const c = exec.call(sql, query, ...bindings);
      cursors.push(c);
      return c;
    }) as typeof sql.exec;
    try {
      await f(o);
    } finally {
      sql.exec = exec;
    }
    return cursors.reduce((n, c) => n + c[counted], 0);
  });
}
