import type { GroupSettings } from "../config/schema.ts";
import type { TokenUsage } from "../routing/protocol.ts";

/**
 * A request's cost in millionths of a dollar. Prices are dollars per million tokens, so a token
 * costs its price in micro-dollars: no rounding until the dollars are shown.
 */
export function costMicros(usage: TokenUsage, pricing: GroupSettings["pricing"]): number {
  if (!pricing) return 0;
  const cached = Math.min(usage.cached, usage.prompt);
  return (usage.prompt - cached) * pricing.promptUsdPerMillion + cached * (pricing.cachedPromptUsdPerMillion ?? pricing.promptUsdPerMillion) + usage.completion * pricing.completionUsdPerMillion;
}
