import type { BackendSnapshot } from "./group-router.ts";

/**
 * What the Worker and a model group's Durable Object say to each other. Both sides import this
 * file and nothing of each other.
 */

/** A group's routing state as its Durable Object holds it (GET /v1/kvgate/status). */
export interface GroupStatus {
  group: string;
  strategy: string;
  leases: number;
  /** RPCs this object served since it started: what benchmarks divide by requests. */
  calls: { route: number; release: number };
  /** Routing state this object found in storage when it started (after an eviction or restart). */
  restored: { breakers: number; affinityBlocks: number };
  backends: BackendSnapshot[];
}
