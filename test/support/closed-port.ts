/**
 * A loopback port nothing listens on: a GPU server that is down. Below the kernel's ephemeral range
 * (32768-60999), so no listen on port 0 by any test can be handed it during the run, as it could a
 * port found free and closed again; and not one of the ports fetch refuses to try ("bad port": 1 is),
 * so a connection to it is refused as a down server's is.
 */
export const CLOSED_PORT = 2;

/** The closed port (async, as its callers await it). */
export async function closedPort(): Promise<number> {
  return CLOSED_PORT;
}
