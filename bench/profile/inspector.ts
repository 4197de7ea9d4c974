/**
 * A Chrome DevTools Protocol session with one workerd Worker's isolate, over the inspector
 * Miniflare opens (harness GatewayOptions.inspect): just enough to start and stop V8's sampling
 * profiler.
 */
import { WebSocket } from "ws";

export interface InspectorSession {
  send<T>(method: string, params?: Record<string, unknown>): Promise<T>;
  close(): void;
}

interface InspectorTarget {
  id: string;
  webSocketDebuggerUrl: string;
}

/** workerd names a user Worker's isolate `core:user:<worker name>`. */
const USER_WORKER = "core:user:";

/** Opens a session with the isolate of the one user Worker behind `inspector` (ws://host:port/). */
export async function openUserWorker(inspector: string): Promise<InspectorSession> {
  const list = (await (await fetch(new URL("/json", inspector.replace(/^ws:/, "http:")))).json()) as InspectorTarget[];
  const users = list.filter((t) => t.id.startsWith(USER_WORKER));
  if (users.length !== 1) throw new Error(`expected one user Worker behind ${inspector}, found ${users.map((t) => t.id).join(", ") || "none"}`);
  const socket = new WebSocket((users[0] as InspectorTarget).webSocketDebuggerUrl);
  await new Promise<void>((resolve, reject) => {
    socket.once("open", () => resolve());
    socket.once("error", reject);
  });
  let nextId = 1;
  const pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  socket.on("message", (data) => {
    const msg = JSON.parse(String(data)) as { id?: number; result?: unknown; error?: { message: string } };
    const waiter = msg.id === undefined ? undefined : pending.get(msg.id);
    if (!waiter || msg.id === undefined) return;
    pending.delete(msg.id);
    if (msg.error) waiter.reject(new Error(`inspector: ${msg.error.message}`));
    else waiter.resolve(msg.result);
  });
  socket.once("close", () => {
    for (const w of pending.values()) w.reject(new Error("inspector closed"));
    pending.clear();
  });
  return {
    send<T>(method: string, params: Record<string, unknown> = {}): Promise<T> {
      const id = nextId++;
      return new Promise<T>((resolve, reject) => {
        pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
        socket.send(JSON.stringify({ id, method, params }));
      });
    },
    close: () => socket.close(),
  };
}
