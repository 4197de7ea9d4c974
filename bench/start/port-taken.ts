/**
 * What `npm start` says when it cannot listen on a port: one line, naming the port and the way
 * to pick another, instead of Node's error and its stack.
 */
import { fleetRange } from "./options.ts";

export type PortOwner = { gateway: true } | { gateway: false; fleetPort: number };

/** The sentence for the error that listening on `port` (the one asked for) ended with. */
export function portRefusal(error: unknown, port: number, owner: PortOwner): string {
  const { code, port: failed } = (error ?? {}) as { code?: unknown; port?: unknown };
  const which = typeof failed === "number" && failed !== 0 ? failed : port;
  const problem =
    code === "EADDRINUSE" ? "is already in use"
    : code === "EACCES" ? "needs privileges this user does not have"
    : `cannot be listened on (${error instanceof Error ? error.message : String(error)})`;
  return owner.gateway
    ? `port ${which} ${problem}; pick another with --port or PORT`
    : `port ${which} ${problem} (the simulated fleet takes ${fleetRange(owner.fleetPort)}); pick others with --fleet-port or KVGATE_FLEET_PORT`;
}
