import type { TestProject } from "vitest/node";
import { startFleet } from "../bench/fleet/index.ts";
import { CLOSED_PORT } from "./support/closed-port.ts";
import { scriptedStream, startScriptedUpstream } from "./support/scripted-upstream.ts";
import { startSwitchableUpstream } from "./support/switchable-upstream.ts";
import { UPSTREAM_MODEL, type Upstreams } from "./support/test-config.ts";

/** Real upstreams on loopback, in Node, for the Workers-runtime tests to reach over HTTP. */
export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const fleet = await startFleet({ workers: 4, basePort: 0, preset: "instant", servedModelName: UPSTREAM_MODEL });
  const scripted = await startScriptedUpstream(scriptedStream(UPSTREAM_MODEL).chunks);
  // Each test file that switches one has its own: files run side by side.
  const switchable = [await startSwitchableUpstream(UPSTREAM_MODEL), await startSwitchableUpstream(UPSTREAM_MODEL), await startSwitchableUpstream(UPSTREAM_MODEL)];
  project.provide("upstreams", { fleetUrls: fleet.urls, scriptedUrl: scripted.url, deadUrl: `http://127.0.0.1:${CLOSED_PORT}`, switchableUrls: switchable.map((u) => u.url) });
  return async () => {
    await Promise.all([fleet.close(), scripted.close(), ...switchable.map((u) => u.close())]);
  };
}
