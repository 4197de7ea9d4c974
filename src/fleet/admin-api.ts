import type { SeedReport } from "./protocol.ts";
import type { DeploymentRecord, UnroutedReason } from "./registry.ts";

/** The admin API's answers, as the Worker writes them and the CLI reads them. */

export interface DeploymentRow {
  id: string;
  url: string;
  model: string;
  state: DeploymentRecord["state"];
  source: DeploymentRecord["source"];
  weight: number;
  maxInFlight: number;
  /** A registered server: when its heartbeat TTL runs out, and when it goes once it has. */
  expiresAt: string | null;
  removeAt: string | null;
  /** From the routing object; null before it has seen the deployment. */
  inFlight: number | null;
  takesRequests: boolean;
  /**
   * Why its group routes it nothing though its state may be active (`binding_not_allowed`: a
   * registered server whose binding the group does not list); null when its state decides.
   */
  unrouted: UnroutedReason | null;
  /** Not taking requests and nothing in flight: safe to stop. */
  drained: boolean;
  breaker: string | null;
  /** Until when (ISO time) it rests after a 429's Retry-After, spared while another backend has room; null when it does not rest now. */
  restingUntil: string | null;
  /** From the routing object, null before it has seen the deployment: prefix-set entries and what it may hold, the TTFT EWMA. */
  prefixBlocks: number | null;
  prefixCapacity: number | null;
  ttftEwmaMs: number | null;
  /** Prompt and cached tokens of the requests whose usage the gateway read (keys that count tokens, hooks that read them): their ratio is the backend's KV cache hit. */
  promptTokens: number | null;
  cachedTokens: number | null;
}

export interface DeploymentList {
  object: "list";
  group: string;
  rev: number;
  data: DeploymentRow[];
}

export interface GroupRow {
  name: string;
  aliases: string[];
  strategy: string;
  rev: number;
  source: DeploymentRecord["source"];
  deployments: number;
}

export interface GroupList {
  object: "list";
  rev: number;
  data: GroupRow[];
}

export interface StatusGroup {
  name: string;
  /** The registry's revision of the group, and the newest its routing object has (null: unreachable). */
  rev: number;
  routingRev: number | null;
  deployments: number;
  takingRequests: number;
  /** Requests in flight on its backends; null when unknown: its routing object, or a shard's it gave up (which may hold requests), did not answer. */
  inFlight: number | null;
  /** Its deployments as GET /admin/v1/groups/{group}/deployments lists them: the whole fleet's in one read (a dashboard refresh). */
  deploymentRows: DeploymentRow[];
}

export interface FleetStatus {
  rev: number;
  groups: StatusGroup[];
  /** What the fleet made of the config's modelGroups at the last deploy that changed them; null before one was told. */
  seed: SeedReport | null;
}
