import { randomBytes } from "node:crypto";

/**
 * A fresh master key (192 random bits) for one run of `npm start` or of a benchmark. Nothing
 * stores it: each run makes its own, so no key is ever committed or reused.
 */
export function newMasterKey(purpose: "dev" | "bench"): string {
  return `sk-kvgate-${purpose}-${randomBytes(24).toString("hex")}`;
}
