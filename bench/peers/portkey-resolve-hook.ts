/** Module resolve hook (runs on Node's hooks thread): see portkey-loopback.ts. */
import type { ResolveHook } from "node:module";

const SHIM = new URL("./portkey-serve-shim.ts", import.meta.url).href;

export const resolve: ResolveHook = async (specifier, context, nextResolve) => {
  const fromPortkey = context.parentURL?.includes("/@portkey-ai/gateway/") ?? false;
  if (specifier !== "@hono/node-server" || !fromPortkey) return nextResolve(specifier, context);
  // The shim loads the real adapter, resolved here where Portkey's own resolution applies.
  const real = await nextResolve(specifier, context);
  return { url: `${SHIM}?real=${encodeURIComponent(real.url)}`, shortCircuit: true };
};
