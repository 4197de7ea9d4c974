import type { GroupSettings } from "../config/schema.ts";
import { forbidden, type GatewayError } from "../openai/errors.ts";
import type { KeyBudget, RouteTenant } from "../routing/protocol.ts";
import type { KeyLookup, KeyRecord } from "./protocol.ts";

/** What a routing object needs of a virtual key to check its limits: sent with the route call. */
export function routeTenant(k: KeyLookup, admitted: boolean): RouteTenant {
  const r = k.record;
  return { id: r.id, rpm: r.rpm, tpm: r.tpm, maxParallel: r.maxParallel, budget: keyBudget(k), admitted, recordsUsage: readsUsage(r) };
}

/** The key's budget, with its spend as the tenants object answered it; null for a key without one. */
export function keyBudget(k: KeyLookup): KeyBudget | null {
  const r = k.record;
  if (r.budgetTokens === null && r.budgetUsd === null) return null;
  return { tokens: r.budgetTokens, costMicros: r.budgetUsd === null ? null : r.budgetUsd * 1e6, period: r.budgetPeriod, spent: k.spent };
}

/**
 * Whether a key's requests must read the upstream's usage: for its token limit, its budget, or
 * its usage records. Those pay JavaScript per chunk; a key that needs none keeps the native pipe.
 */
export function readsUsage(r: KeyRecord): boolean {
  return r.trackUsage || r.tpm !== null || r.budgetTokens !== null || r.budgetUsd !== null;
}

/** Whether the key may call `model` (a name or alias of `group`). */
export function allowsModel(r: KeyRecord, model: string, group: string): boolean {
  return r.models.length === 0 || r.models.includes(model) || r.models.includes(group);
}

/**
 * Whether the key may be served by a group it did not ask for (a fallback): only if it may call
 * the group by one of its names, and the group can count its spend. A key's models bound what
 * serves it, not only what it asks for, or a key for a cheap model could reach a dear one by
 * making its own model fail.
 */
export function allowsGroup(r: KeyRecord, group: { name: string; aliases: readonly string[] } & Pick<GroupSettings, "pricing">): boolean {
  return countsSpendIn(r, group) && listsGroup(r, group);
}

/** Whether the key's models hold the group by one of its names (or hold none: every model). */
export function listsGroup(r: KeyRecord, group: { name: string; aliases: readonly string[] }): boolean {
  return [group.name, ...group.aliases].some((name) => allowsModel(r, name, group.name));
}

/**
 * Whether the group can count the key's spend. A budget in dollars is counted at the price of the
 * group that served each request, and a group without `pricing` prices every token at $0: a key
 * whose only budget is in dollars would never reach it there. So such a key is not served by such
 * a group (fail closed: unpricedModel where it is the model's own, passed over as a fallback); a
 * token budget counts anywhere, dollars beside it or not. One comparison for a key with no budget
 * in dollars.
 */
export function countsSpendIn(r: KeyRecord, group: Pick<GroupSettings, "pricing">): boolean {
  return r.budgetUsd === null || r.budgetTokens !== null || group.pricing !== undefined;
}

/** The 403 of a key whose only budget is in dollars, for a model whose group has no pricing (countsSpendIn). */
export function unpricedModel(r: KeyRecord, model: string): GatewayError {
  return forbidden(
    `model "${model}" has no pricing, and API key ${r.prefix}… has a budget in dollars alone, which could not count its spend there: its group needs a pricing, or the key a budget_tokens`,
    "model_not_priced",
  );
}
