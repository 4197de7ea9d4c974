/**
 * Writes src/config/public-tlds.ts: the top-level domains delegated in the root zone, from the npm
 * package `tlds` (IANA's list), IDNs in the A-label form a URL's hostname takes (рф as xn--p1ai).
 * A module of its own, not the package at run time: the Worker's bundle then holds the names once,
 * as one string, and an isolate converts none of them when it starts.
 *   npm install --save-dev --save-exact tlds@latest && node scripts/public-tlds.ts
 * test/unit/private-hosts.test.ts fails while the module and the installed package differ.
 */
import { writeFileSync } from "node:fs";
import { domainToASCII } from "node:url";
import tlds from "tlds" with { type: "json" };
import tldsPackage from "tlds/package.json" with { type: "json" };

export const PUBLIC_TLDS_FILE = new URL("../src/config/public-tlds.ts", import.meta.url);

/** The module's text for the package's list: the names in A-label form, sorted, 100 characters a line. */
export function publicTldsModule(names: readonly string[] = tlds, version: string = tldsPackage.version): string {
  const labels = [...new Set(names.map((name) => domainToASCII(name)))].sort();
  if (labels.some((label) => !/^[a-z0-9-]+$/.test(label))) throw new Error(`tlds ${version}: a name with no A-label form`);
  const lines: string[] = [];
  for (const label of labels) {
    const last = lines.length - 1;
    if (last >= 0 && (lines[last] as string).length + 1 + label.length <= 100) lines[last] += ` ${label}`;
    else lines.push(label);
  }
  return `// Written by scripts/public-tlds.ts from the npm package tlds ${version}: do not edit.

/** The top-level domains delegated in the root zone (${labels.length}), IDNs in A-label form: the last labels public DNS resolves. */
export const PUBLIC_TLDS: ReadonlySet<string> = new Set(
  \`
${lines.join("\n")}
\`
    .trim()
    .split(/\\s+/),
);
`;
}

if (import.meta.main) {
  writeFileSync(PUBLIC_TLDS_FILE, publicTldsModule());
  console.log(`wrote ${PUBLIC_TLDS_FILE.pathname}`);
}
