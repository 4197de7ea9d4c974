import type { Endpoint } from "../openai/endpoints.ts";
import type { Usage } from "../stream/usage.ts";

/** What a hook knows of the request it runs for. */
export interface HookContext {
  requestId: string;
  group: string;
  /** The model name the client asked for (a group name or alias). */
  clientModel: string;
  /** The deployment's model name, which the upstream reports. */
  upstreamModel: string;
  backendId: string;
  stream: boolean;
  endpoint: Endpoint;
  /** Set by the usage hook's onRequest: it asked the upstream for a usage event the client did not ask for. */
  stripUsage?: boolean;
}

/** Per-request byte transform; `flush` returns what it still holds when the body ends. */
export interface ChunkTransform {
  transform(chunk: Uint8Array): Uint8Array;
  flush(): Uint8Array | null;
}

export interface CompletionSummary {
  outcome: "ok" | "upstream-error" | "client-abort";
  /** null on the fast path, which counts nothing (no hook asked). */
  bytes: number | null;
  /** The final usage event's figures, when a hook path read the tail; null on the fast path. */
  usage: Usage | null;
  ttftMs: number | null;
  /**
   * The SSE events that passed, where the usage was read (readsUsage); null otherwise. A stream
   * its client left before the usage event is charged by them (a token an event).
   */
  events: number | null;
  /**
   * The gateway's own relay failed (a hook's transform or flush threw), not the upstream: its
   * `outcome` is `upstream-error` for the hooks, but it is no verdict on the backend.
   */
  relayFailed?: true;
}

/**
 * A hook declares only the phases it needs; the pipeline of a request is assembled from those
 * phases alone, so an unconfigured phase costs nothing.
 */
export interface Hook {
  readonly name: string;
  /** May change the request body before it is serialised for the upstream. */
  onRequest?(body: Record<string, unknown>, ctx: HookContext): void;
  /** May change the response headers sent to the client. */
  onHeaders?(headers: Headers, ctx: HookContext): void;
  /** A per-request transform, or null when it has nothing to do for this request. */
  onChunk?(ctx: HookContext): ChunkTransform | null;
  /** Runs after the response ended, off the request path. */
  onComplete?(summary: CompletionSummary, ctx: HookContext): void | Promise<void>;
  /**
   * Needs the upstream's usage at the end (in onComplete's summary and the lease's release): the
   * body then takes the JavaScript path, which keeps its tail, instead of the native pipe.
   */
  readonly readsUsage?: boolean;
}

/** A group's hooks, sorted by phase once at config load. */
export interface HookPipeline {
  request: Hook[];
  headers: Hook[];
  chunk: Hook[];
  complete: Hook[];
  /** Some hook reads the upstream's usage. */
  readsUsage: boolean;
}
