/** The Worker's bundle as `wrangler deploy --dry-run` builds it, raw and gzipped. */
import { readFile } from "node:fs/promises";
import { gzipSync } from "node:zlib";
import { buildGateway } from "../harness/gateway.ts";

export interface BundleInfo {
  bytes: number;
  gzipBytes: number;
}

export async function bundleInfo(): Promise<BundleInfo> {
  const code = await readFile(await buildGateway());
  // Level 9 approximates what wrangler reports as the gzipped upload size.
  return { bytes: code.length, gzipBytes: gzipSync(code, { level: 9 }).length };
}
