import { familyByFamily, type ScrapedGroup } from "./group-metrics.ts";
import { PROMETHEUS_CONTENT_TYPE, renderStream } from "./prometheus-text.ts";

/**
 * `GET /metrics`' answer: the groups' families as Prometheus text, streamed, each family made as
 * the text reaches it, so neither every family's samples nor the whole text is held at once
 * (familyByFamily; test/unit/scrape-memory.test.ts).
 */
export function metricsResponse(groups: readonly ScrapedGroup[], unreachable: readonly string[]): Response {
  return new Response(renderStream(familyByFamily(groups, unreachable)), { headers: { "content-type": PROMETHEUS_CONTENT_TYPE } });
}
