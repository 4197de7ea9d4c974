/**
 * Which hosts only a private network reaches, and the rule that follows for secrets: a deployment
 * on the public internet over plain http would send its bearer key or Access token in cleartext
 * with every prompt. The deploy check (scripts/production-config.ts) and the fleet registry (the
 * admin API and heartbeats) read both from here; a tenant's media URLs (content-parts.ts), a stricter
 * rule on hosts.
 */
import { PUBLIC_TLDS } from "./public-tlds.ts";

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
  const groups = ipv6Groups(host);
  // RFC 8215's local-use NAT64 prefix: a network's own translator, whatever the prefix length it chose (and so where the IPv4 sits).
  if (groups?.[0] === 0x64 && groups[1] === 0xff9b && groups[2] === 1) return "a local-use NAT64 address (64:ff9b:1::/48)";
  const v4 = groups && embeddedV4(groups);
  if (v4) return unreachableV4(v4);
  if (/^f[cd][0-9a-f]{2}:/.test(host)) return "a private address";
  if (/^fe[89ab][0-9a-f]:/.test(host)) return "a link-local address";
  return null;
}

/** The eight 16-bit groups of an IPv6 address as the URL parser writes it: hex only, one "::" at most. */
function ipv6Groups(host: string): number[] | null {
  const [head, tail, more] = host.split("::");
  if (more !== undefined) return null;
  const read = (part: string | undefined) => (part ? part.split(":").map((g) => parseInt(g, 16)) : []);
  const left = read(head);
  const right = read(tail);
  const groups = tail === undefined ? left : [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
  return groups.length === 8 && groups.every((g) => g >= 0 && g <= 0xffff) ? groups : null;
}

/**
 * The IPv4 address an IPv6 one stands for, where the network between turns it into that address:
 * IPv4-mapped (::ffff:0:0/96, the host's own stack), IPv4-translated (::ffff:0:0:0/96, SIIT),
 * NAT64's well-known prefix (64:ff9b::/96: AWS's NAT gateways and DNS64 networks translate it)
 * and 6to4 (2002::/16, the IPv4 in its second and third groups).
 */
function embeddedV4(g: readonly number[]): Ipv4 | null {
  const at = (i: number): Ipv4 => {
    const hi = g[i] as number;
    const lo = g[i + 1] as number;
    return [hi >> 8, hi & 255, lo >> 8, lo & 255];
  };
  const zero = (from: number, to: number) => g.slice(from, to).every((x) => x === 0);
  if (g[0] === 0x2002) return at(1);
  if (zero(0, 5) && g[5] === 0xffff) return at(6);
  if (zero(0, 4) && g[4] === 0xffff && g[5] === 0) return at(6);
  if (g[0] === 0x64 && g[1] === 0xff9b && zero(2, 6)) return at(6);
  return null;
}

function unreachableName(host: string): string | null {
  if (host === "localhost" || host.endsWith(".localhost")) return "a loopback address";
  // A Docker service or a LAN host: public DNS resolves no name without a dot.
  if (!host.includes(".")) return "a single-label name (a Docker or LAN host's)";
  const suffix = /\.(local|internal|home\.arpa)$/.exec(host)?.[1];
  return suffix ? `a private network's name (.${suffix})` : null;
}

/**
 * What a tenant's media URL's host is that only a private network reaches or resolves, or null:
 * unreachableHost's, and a name whose last label no public DNS has: no top-level domain of the root
 * zone. Refusing that refuses nothing a fetch from the internet reaches, while an engine's own
 * resolver may answer it: a Kubernetes pod's searches <ns>.svc.cluster.local first, so
 * kubernetes.default.svc and prometheus.monitoring are ClusterIPs. A tenant's only: deployments and
 * examples name servers with reserved names (gpu.example) that the deploy check and the registry take.
 */
export function privateOnlyHost(hostname: string): string | null {
  const why = unreachableHost(hostname);
  const host = hostname.replace(/\.$/, "");
  if (why || host.startsWith("[") || ipv4(host)) return why;
  const tld = host.slice(host.lastIndexOf(".") + 1);
  return PUBLIC_TLDS.has(tld) ? null : `a name no public DNS resolves (.${tld} is no public top-level domain)`;
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
