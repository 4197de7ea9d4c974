/**
 * The ports fetch will not connect to: the Fetch standard's "bad port" list
 * (https://fetch.spec.whatwg.org/#bad-port). Browsers and Node's fetch (undici) refuse a request
 * to any of them before a connection is made, with the reason "bad port": a gateway listening on
 * one is reachable by curl, yet not by `npm start`'s readiness check, the CLI, the dashboard or an
 * SDK that uses fetch. Node exports no copy of the list (undici keeps its own internal), so this
 * is the spec's; test/unit/fetch-blocked-ports.test.ts checks Node's fetch refuses each of them.
 */
const BAD_PORTS: readonly number[] = [
  1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95, 101, 102, 103, 104, 109, 110, 111, 113,
  115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465, 512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556,
  563, 587, 601, 636, 989, 990, 993, 995, 1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667,
  6668, 6669, 6679, 6697, 10080,
];

export const FETCH_BLOCKED_PORTS: ReadonlySet<number> = new Set(BAD_PORTS);

/** Why fetch (and so a browser, Node and the CLI) cannot call a server on `port`; null when it can. */
export function fetchBlockedPort(port: number): string | null {
  return FETCH_BLOCKED_PORTS.has(port) ? `port ${port} is one that browsers and fetch refuse to connect to (the Fetch standard's "bad ports")` : null;
}
