import type { Hono } from "hono";
import type { ScrapedGroup } from "../../src/metrics/group-metrics.ts";
import { unpackKeys } from "../../src/metrics/key-columns.ts";
import { metricsResponse } from "../../src/metrics/scrape-response.ts";
import type { LoadedConfig } from "../config.ts";
import type { AppEnv } from "./app-env.ts";
import { authenticateMetrics } from "./auth.ts";
import { scrapedGroup } from "../../src/sharding/merge.ts";
import { objectNamesOf, routingObjectNames } from "../../src/sharding/partition.ts";
import { recentFleet } from "../fleet.ts";
import { askEveryObject, fleetReadDeadline, groupIds } from "./group-object.ts";

/**
 * GET /metrics: the groups' counters in Prometheus text format, for the metrics key or the admin
 * key. Each group's routing object holds its own (global, not one isolate's): one call each (one
 * per shard of a sharded group, and one per object of a shard it gave up), a bounded number of
 * groups at a time (askEveryObject), over the fleet as the registry has it. A group whose
 * object does not answer (or one of whose shards) is reported down, not failed on: the others'
 * series (and its answering objects') still come. One of a shard it gave up that does not answer,
 * before it handed its counts over, leaves the group up and its own series out of the scrape
 * (each counter's series is one object's: metricFamilies).
 */
export function mountMetrics(app: Hono<AppEnv>, config: LoadedConfig): void {
  app.get("/metrics", async (c) => {
    // The scrape's time counts from its arrival, the registry's read within it: the whole answers within Prometheus's 10 s.
    const until = fleetReadDeadline();
    await authenticateMetrics(c.req.raw, config, c.env);
    const fleet = await recentFleet(c.env, c.executionCtx, config.groups);
    const groups: ScrapedGroup[] = [];
    const down: string[] = [];
    // A group of several objects names each series' shard (metricFamilies), as many as it has whether they answer or not.
    const sharded = new Set(fleet.groups.filter((g) => routingObjectNames(g.name, g.shards, fleet.objects.get(g.name)).length > 1).map((g) => g.name));
    // The shards each group has now: the object of one is never shown by the counts it once handed over (scrapedGroup).
    const shards = new Map(fleet.groups.map((g) => [g.name, objectNamesOf(g.name, g.shards).length]));
    for (const a of await askEveryObject(c.env, fleet, async (o, g) => unpackKeys(await o.metrics(groupIds(g))), until)) {
      // A sharded group some of whose objects answered: their series, and the group reported down.
      if (a.answers.length > 0) groups.push(scrapedGroup(a.group, a.answers, a.objects, sharded.has(a.group), shards.get(a.group) ?? 1));
      if (!a.complete) down.push(a.group);
    }
    return metricsResponse(groups, down);
  });
}
