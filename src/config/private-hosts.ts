/**
 * Which hosts only a private network reaches, and the rule that follows for secrets: a deployment
 * on the public internet over plain http would send its bearer key or Access token in cleartext
 * with every prompt. The deploy check (scripts/production-config.ts) and the fleet registry (the
 * admin API and heartbeats) read both from here.
 */

/**
 * What a URL's parsed hostname is that a Worker on Cloudflare cannot fetch, or null: its own
 * loopback, networks it has no route into, and names only such a network's DNS resolves. The URL
 * parser has already lower-cased it, put IPv4 numbers in dotted form and IPv6 in brackets.
 */
export function unreachableHost(hostname: string): string | null {
  // "localhost." is localhost: a trailing dot only says the name is fully qualified.
  const host = hostname.replace(/\.$/, "");
  if (host.startsWith("[")) return unreachableV6(host.slice(1, -1));
  const v4 = ipv4(host);
  return v4 ? unreachableV4(v4) : unreachableName(host);
}

type Ipv4 = readonly [number, number, number, number];

function ipv4(host: string): Ipv4 | null {
  const m = /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(host);
  return m ? [Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4])] : null;
}

function unreachableV4([a, b, c, d]: Ipv4): string | null {
  if (a === 127 || [a, b, c, d].every((x) => x === 0)) return "a loopback address";
  if (a === 10 || (a === 172 && b >= 16 && b <= 31) || (a === 192 && b === 168)) return "a private address";
  if (a === 169 && b === 254) return "a link-local address";
  if (a === 100 && b >= 64 && b <= 127) return "a carrier-grade NAT address (100.64.0.0/10, Tailscale's too)";
  return null;
}

function unreachableV6(host: string): string | null {
  if (host === "::1" || host === "::") return "a loopback address";
  // An IPv4-mapped address is that IPv4 address; the parser writes it as two hex groups (::ffff:c0a8:105).
  const mapped = /^::ffff:([0-9a-f]{1,4}):([0-9a-f]{1,4})$/.exec(host);
  if (mapped) {
    const hi = parseInt(mapped[1] as string, 16);
    const lo = parseInt(mapped[2] as string, 16);
    return unreachableV4([hi >> 8, hi & 255, lo >> 8, lo & 255]);
  }
  if (/^f[cd][0-9a-f]{2}:/.test(host)) return "a private address";
  if (/^fe[89ab][0-9a-f]:/.test(host)) return "a link-local address";
  return null;
}

function unreachableName(host: string): string | null {
  if (host === "localhost" || host.endsWith(".localhost")) return "a loopback address";
  // A Docker service or a LAN host: public DNS resolves no name without a dot.
  if (!host.includes(".")) return "a single-label name (a Docker or LAN host's)";
  const suffix = /\.(local|internal|home\.arpa)$/.exec(host)?.[1];
  return suffix ? `a private network's name (.${suffix})` : null;
}

/** What a deployment sends its server that a network between them could read. */
interface SecretCarrier {
  baseUrl: string;
  binding?: string | undefined;
  apiKeyEnv?: string | undefined;
  headersFromEnv?: Readonly<Record<string, string>> | undefined;
}

/**
 * Why the deployment's secrets would cross the internet in cleartext, or null: a plain-http base
 * URL on a public host, reached without a binding, naming apiKeyEnv or headersFromEnv. Inside a
 * private network (a binding's, or a host only one reaches) plain http is the operator's call.
 */
export function cleartextSecret(d: SecretCarrier): string | null {
  if (d.binding !== undefined) return null;
  const secret = d.apiKeyEnv !== undefined ? "apiKeyEnv" : d.headersFromEnv && Object.keys(d.headersFromEnv).length > 0 ? "headersFromEnv" : null;
  const url = URL.parse(d.baseUrl);
  if (!secret || !url || url.protocol !== "http:" || unreachableHost(url.hostname)) return null;
  return `${d.baseUrl} is plain http, and the deployment's ${secret} would cross the internet in cleartext, with every prompt (use https, or reach it through a Workers VPC binding: README, "Private networks")`;
}
