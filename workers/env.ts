import type { FleetRegistryRpc } from "../src/fleet/protocol.ts";
import type { ModelGroupRpc } from "../src/routing/protocol.ts";
import type { TenantsAdminRpc, TenantsRpc } from "../src/tenants/protocol.ts";

/** The one thing the gateway needs of a request's execution context. */
export interface WaitUntil {
  waitUntil(promise: Promise<unknown>): void;
}

export interface Env {
  /** The model groups' Durable Objects, one per group name (durable-objects/model-group.ts). */
  MODEL_GROUP: DurableObjectNamespace<ModelGroupRpc & Rpc.DurableObjectBranded>;
  /** The fleet registry: one object, named "fleet" (durable-objects/fleet-registry.ts). */
  FLEET: DurableObjectNamespace<FleetRegistryRpc & Rpc.DurableObjectBranded>;
  /** The tenants: one object, named "tenants" (durable-objects/tenants.ts): virtual keys and their usage. */
  TENANTS: DurableObjectNamespace<TenantsRpc & TenantsAdminRpc & Rpc.DurableObjectBranded>;
  /** The gateway config as JSON (see src/config/schema.ts); a var in wrangler.toml, overridable per environment or as a secret. */
  KVGATE_CONFIG: string;
  /** Secrets named by the config (master key, upstream API keys) are read by name. */
  [secret: string]: unknown;
}
