/**
 * What a production config must be beyond valid: reachable from Cloudflare (public URLs, or
 * bindings the production Worker has), sending no secret in cleartext, and small enough for the
 * secret that carries it.
 */
import type { ResolvedConfig } from "../src/config/load.ts";
import { cleartextSecret, unreachableHost } from "../src/config/private-hosts.ts";

/** What Cloudflare lets one Worker var or secret hold. */
export const SECRET_MAX_BYTES = 5 * 1024;

/** `bindings`: the names wrangler.toml's [env.production] binds. */
export function productionProblems(config: ResolvedConfig, json: string, bindings: ReadonlySet<string>): string[] {
  const out: string[] = [];
  for (const [gi, g] of config.groups.entries()) {
    for (const [di, d] of g.deployments.entries()) {
      const at = `modelGroups[${gi}].deployments[${di}]`;
      if (d.binding && !bindings.has(d.binding)) out.push(`${at}.binding "${d.binding}" is not bound in wrangler.toml's [env.production] (add it to vpc_services or vpc_networks there)`);
      // Through a binding, the URL names the server inside the private network: any host may be right.
      if (d.binding) continue;
      const url = new URL(d.baseUrl);
      const what = unreachableHost(url.hostname);
      if (what) out.push(`${at}.baseUrl ${d.baseUrl} is ${what}, which a Worker on Cloudflare cannot reach (reach it through a Workers VPC binding: README, "Private networks")`);
      const cleartext = cleartextSecret(d);
      if (cleartext) out.push(`${at}.baseUrl ${cleartext}`);
    }
  }
  // A self-registered server names its binding in its heartbeat: one production lacks refuses every
  // heartbeat, found by the GPU servers after a deploy that said ok.
  for (const [gi, g] of (config.seed?.groups ?? []).entries()) {
    for (const [bi, b] of (g.registrationBindings ?? []).entries()) {
      if (!bindings.has(b)) out.push(`modelGroups[${gi}].registrationBindings[${bi}] "${b}" is not bound in wrangler.toml's [env.production] (add it to vpc_services or vpc_networks there)`);
    }
  }
  const bytes = new TextEncoder().encode(json).length;
  if (bytes > SECRET_MAX_BYTES) out.push(`the config is ${bytes} bytes as JSON, and a Worker secret holds at most ${SECRET_MAX_BYTES}`);
  return out;
}
