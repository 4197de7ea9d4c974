import type { TestProject } from "vitest/node";
import { buildGateway } from "../../bench/harness/gateway.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** The gateway bundled as `wrangler deploy` bundles it, once for every e2e file. */
    gatewayScript: string;
  }
}

export default async function setup(project: TestProject): Promise<void> {
  project.provide("gatewayScript", await buildGateway());
}
