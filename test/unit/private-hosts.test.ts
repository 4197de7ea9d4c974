import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { PUBLIC_TLDS_FILE, publicTldsModule } from "../../scripts/public-tlds.ts";
import { privateOnlyHost, unreachableHost } from "../../src/config/private-hosts.ts";
import { PUBLIC_TLDS } from "../../src/config/public-tlds.ts";

/** A URL's hostname as the parser writes it, which is what the checks are given. */
const hostOf = (url: string) => new URL(url).hostname;

describe("unreachableHost: an IPv6 address that stands for an IPv4 one is judged as that IPv4", () => {
  it.each([
    ["http://[::ffff:192.168.1.5]/", "a private address"],
    ["http://[::ffff:0:169.254.169.254]/", "a link-local address"],
    // NAT64's well-known prefix: AWS's NAT gateways (and any DNS64 network's) translate it to 10.0.0.5.
    ["http://[64:ff9b::a00:5]/", "a private address"],
    ["http://[64:ff9b::10.0.0.5]/", "a private address"],
    ["http://[64:ff9b::7f00:1]/", "a loopback address"],
    ["http://[64:ff9b::a9fe:a9fe]/", "a link-local address"],
    ["http://[2002:a9fe:a9fe::]/", "a link-local address"],
    ["http://[2002:c0a8:105:1::1]/", "a private address"],
    ["http://[2002:6440:1::]/", "a carrier-grade NAT address (100.64.0.0/10, Tailscale's too)"],
    // RFC 8215's local-use prefix: the network chose where the IPv4 sits, and only its own translator reaches it.
    ["http://[64:ff9b:1::a00:5]/", "a local-use NAT64 address (64:ff9b:1::/48)"],
    ["http://[64:ff9b:1:ab:cd::5db8:d70e]/", "a local-use NAT64 address (64:ff9b:1::/48)"],
  ])("%s is %s", (url, why) => {
    expect(unreachableHost(hostOf(url))).toBe(why);
  });

  it.each(["http://[64:ff9b::5db8:d70e]/", "http://[2002:5db8:d70e::1]/", "http://[::ffff:93.184.215.14]/", "http://[2606:4700::1111]/", "http://[64:ff9b:2::a00:5]/"])("%s, a public IPv4's or no embedding, passes", (url) => {
    expect(unreachableHost(hostOf(url))).toBeNull();
  });

  it("takes a name under no public top-level domain: the deploy check and the registry's configs name servers gpu.example", () => {
    expect(unreachableHost("gpu.example")).toBeNull();
    expect(unreachableHost("vllm.team-a.svc")).toBeNull();
  });
});

describe("privateOnlyHost: a tenant's media URL's host, which an engine's own resolver may resolve inside its network", () => {
  it.each([
    ["http://kubernetes.default.svc/", "a name no public DNS resolves (.svc is no public top-level domain)"],
    ["http://kubernetes.default.svc./", "a name no public DNS resolves (.svc is no public top-level domain)"],
    ["http://prometheus.monitoring:9090/", "a name no public DNS resolves (.monitoring is no public top-level domain)"],
    ["http://vllm-b.team-b.svc:8000/metrics", "a name no public DNS resolves (.svc is no public top-level domain)"],
    ["http://localhost.localdomain/", "a name no public DNS resolves (.localdomain is no public top-level domain)"],
    ["http://gpu.example/", "a name no public DNS resolves (.example is no public top-level domain)"],
    // unreachableHost's answer, where it has one.
    ["http://metadata.google.internal/", "a private network's name (.internal)"],
    ["http://vllm-0/", "a single-label name (a Docker or LAN host's)"],
    ["http://[64:ff9b::a00:5]/", "a private address"],
  ])("%s is %s", (url, why) => {
    expect(privateOnlyHost(hostOf(url))).toBe(why);
  });

  it.each(["https://upload.wikimedia.org/", "HTTPS://CDN.EXAMPLE.COM./", "https://пример.рф/", "https://images.example.co.uk/", "http://93.184.215.14/", "http://[2606:4700::1111]/"])("%s passes: a public top-level domain's name, or a public address", (url) => {
    expect(privateOnlyHost(hostOf(url))).toBeNull();
  });
});

describe("PUBLIC_TLDS", () => {
  it("is the installed tlds package's list, as scripts/public-tlds.ts writes it (run it after updating the package)", () => {
    expect(readFileSync(PUBLIC_TLDS_FILE, "utf8")).toBe(publicTldsModule());
  });

  it("holds the root zone's names in the form a URL's hostname takes, and none of the reserved ones", () => {
    expect(PUBLIC_TLDS.size).toBeGreaterThan(1000);
    for (const tld of ["com", "io", "uk", "dev", "arpa", "xn--p1ai"]) expect(PUBLIC_TLDS.has(tld), tld).toBe(true);
    for (const tld of ["svc", "cluster", "local", "internal", "localdomain", "example", "test", "invalid", "localhost", "рф"]) expect(PUBLIC_TLDS.has(tld), tld).toBe(false);
  });
});
