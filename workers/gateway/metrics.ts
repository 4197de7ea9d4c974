import type { Hono } from "hono";
import { metricFamilies, type GroupMetrics } from "../../src/metrics/group-metrics.ts";
import { PROMETHEUS_CONTENT_TYPE, renderText } from "../../src/metrics/prometheus-text.ts";
import type { LoadedConfig } from "../config.ts";
import type { AppEnv } from "./app-env.ts";
import { authenticateMetrics } from "./auth.ts";
import { mergeMetrics } from "../../src/sharding/merge.ts";
import { askEachObject } from "./group-object.ts";

/**
 * GET /metrics: the groups' counters in Prometheus text format, for the metrics key or the admin
 * key. Each group's routing object holds its own (global, not one isolate's): one call each (one
 * per shard of a sharded group), all at once. A group whose object does not answer is reported
 * down, not failed on: the others' series still come.
 */
export function mountMetrics(app: Hono<AppEnv>, config: LoadedConfig): void {
  app.get("/metrics", async (c) => {
    await authenticateMetrics(c.req.raw, config, c.env);
    const answers = await Promise.allSettled(config.groups.map(async (g) => mergeMetrics(await askEachObject(c.env, g, (o) => o.metrics()))));
    const groups: GroupMetrics[] = [];
    const down: string[] = [];
    answers.forEach((a, i) => {
      if (a.status === "fulfilled") groups.push(a.value);
      else {
        const name = config.groups[i]?.name ?? "";
        down.push(name);
        console.error(`kvgate: metrics of group ${name} unavailable: ${a.reason instanceof Error ? a.reason.message : String(a.reason)}`);
      }
    });
    return new Response(renderText(metricFamilies(groups, down)), { headers: { "content-type": PROMETHEUS_CONTENT_TYPE } });
  });
}
