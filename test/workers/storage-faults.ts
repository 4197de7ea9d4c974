import { runInDurableObject } from "cloudflare:test";

/** The object's next statement that starts with `start` throws, once, as a storage error would; the others run. */
export function failNext<O extends Rpc.DurableObjectBranded>(stub: DurableObjectStub<O>, start: string): Promise<void> {
  return runInDurableObject(stub, (_o, state) => {
    const sql = state.storage.sql;
    const exec = sql.exec;
    sql.exec = ((query: string, ...bindings: SqlStorageValue[]) => {
      if (!query.startsWith(start)) return exec.call(sql, query, ...bindings);
      sql.exec = exec;
      throw new Error("storage error (test)");
    }) as typeof sql.exec;
  });
}
