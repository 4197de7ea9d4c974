import { describe, expect, it } from "vitest";
import { FETCH_BLOCKED_PORTS, fetchBlockedPort } from "../../src/fetch-blocked-ports.ts";

/** What Node's own fetch says of a request to `port` on loopback: "bad port", or how else it failed. */
async function nodeFetchRefusal(port: number): Promise<string> {
  try {
    await fetch(`http://127.0.0.1:${port}/`);
    return "answered";
  } catch (e) {
    return String((e as { cause?: { message?: unknown; code?: unknown } }).cause?.message ?? e);
  }
}

describe("the ports fetch will not connect to", () => {
  it("are each refused by Node's fetch as a bad port, before any connection: the list is the one Node enforces", async () => {
    expect(FETCH_BLOCKED_PORTS.size).toBeGreaterThan(70);
    for (const port of FETCH_BLOCKED_PORTS) expect({ port, refusal: await nodeFetchRefusal(port) }).toEqual({ port, refusal: "bad port" });
  });

  it("are named in one line; any other port is not refused", () => {
    expect(fetchBlockedPort(6000)).toBe('port 6000 is one that browsers and fetch refuse to connect to (the Fetch standard\'s "bad ports")');
    for (const port of [0, 80, 443, 5999, 6001, 8787, 9001]) expect(fetchBlockedPort(port)).toBeNull();
  });
});
