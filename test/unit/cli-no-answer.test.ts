import { writeFile } from "node:fs/promises";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterEach, describe, expect, it, vi } from "vitest";
import { adminClient } from "../../cli/admin-client.ts";
import { CliError } from "../../cli/cli-error.ts";
import type { Command, Flags } from "../../cli/command-io.ts";
import { FLEET_COMMANDS } from "../../cli/commands.ts";
import { KEY_COMMANDS } from "../../cli/keys.ts";
import { main, USAGE } from "../../cli/main.ts";
import { closedPort } from "../support/closed-port.ts";
import { useTempDir } from "../support/temp-dir.ts";

/**
 * `npx kvgate` against a gateway that takes the request and does not answer in time (its tenants
 * object or fleet registry overloaded): a change may have been made, so the CLI must not say the
 * gateway was not reached, which tells the operator to send it again (a second key, whose secret
 * nobody saw; a second rotation). The stand-in is a real socket; the CLI's wait is shortened.
 */

const WAIT_MS = 300;
const tempDir = useTempDir("kvgate-cli-no-answer-");

let server: http.Server | undefined;
afterEach(() => {
  server?.closeAllConnections();
  return new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
});

/**
 * A gateway that reads each request whole and never answers it (`headers`: it sends its headers
 * and the body's first bytes, then nothing more; `cut`: it closes the connection, as `npm start`'s
 * wrangler dev does when it reloads or crashes under a request, or a load balancer resetting it).
 */
async function silentGateway(then: "nothing" | "headers" | "cut" = "nothing"): Promise<{ url: string; seen: string[] }> {
  const seen: string[] = [];
  server = http.createServer((req, res) => {
    req.resume().on("end", () => {
      seen.push(`${req.method} ${req.url}`);
      if (then === "headers") res.writeHead(200, { "content-type": "application/json", "content-length": "1000" }).write('{"id":');
      if (then === "cut") req.socket.destroy();
    });
  });
  await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${(server?.address() as AddressInfo).port}`, seen };
}

/** Runs one command through the CLI's own client; the error it ends with (null if none). */
async function run(url: string, command: Command | undefined, flags: Flags, args: string[] = []): Promise<CliError> {
  const api = adminClient({ KVGATE_URL: url, KVGATE_ADMIN_KEY: "admin-key" }, fetch, WAIT_MS);
  const quiet = { out: () => undefined, note: () => undefined, sleep: async () => undefined };
  const error = await command?.(api, flags, quiet, args).then(() => null, (e: unknown) => e);
  expect(error).toBeInstanceOf(CliError);
  return error as CliError;
}

describe("npx kvgate, a change the gateway took and did not answer in time", () => {
  it("says the change may have been made and names the command that reads it back, exit 1: not that the gateway was not reached", async () => {
    const fleetFile = join(tempDir(), "fleet.json");
    await writeFile(fleetFile, JSON.stringify({ modelGroups: [] }));
    const cases: [string, Command | undefined, Flags, string[], string, string][] = [
      ["keys create", KEY_COMMANDS["keys create"], { name: "ci" }, [], "POST /admin/v1/keys", "npx kvgate keys list"],
      ["keys rotate", KEY_COMMANDS["keys rotate"], {}, ["key_1"], "POST /admin/v1/keys/key_1/rotate", "npx kvgate keys show key_1"],
      ["keys revoke", KEY_COMMANDS["keys revoke"], {}, ["key_1"], "POST /admin/v1/keys/key_1/revoke", "npx kvgate keys show key_1"],
      ["fleet apply", FLEET_COMMANDS["fleet apply"], { file: fleetFile }, [], "PUT /admin/v1/fleet", "npx kvgate fleet export"],
      ["deployments remove", FLEET_COMMANDS["deployments remove"], { group: "g", id: "gpu-5" }, [], "DELETE /admin/v1/groups/g/deployments/gpu-5", "npx kvgate deployments list --group g"],
      ["deployments drain", FLEET_COMMANDS["deployments drain"], { group: "g", id: "gpu-5", wait: true }, [], "POST /admin/v1/groups/g/deployments/gpu-5/drain", "npx kvgate deployments list --group g"],
    ];
    for (const [name, command, flags, args, call, readBack] of cases) {
      const { url, seen } = await silentGateway();
      const error = await run(url, command, flags, args);
      // The request went out whole: whatever the gateway does with it, it may be done.
      expect(seen, name).toEqual([call]);
      expect({ name, exitCode: error.exitCode, message: error.message }).toEqual({
        name,
        exitCode: 1,
        message: `${call}: no answer within ${WAIT_MS / 1000} s; the change may have been made: read it back (${readBack}) before sending it again`,
      });
      server?.closeAllConnections();
      await new Promise((resolve) => server?.close(resolve));
      server = undefined;
    }
  });

  it("says the same when the time runs out halfway through the answer", async () => {
    const { url } = await silentGateway("headers");
    const error = await run(url, KEY_COMMANDS["keys create"], {});
    expect(error.message).toBe(`POST /admin/v1/keys: no answer within ${WAIT_MS / 1000} s; the change may have been made: read it back (npx kvgate keys list) before sending it again`);
  });
});

describe("npx kvgate, a change whose connection closed after the request went out", () => {
  it("says the change may have been made and names the command that reads it back: not that the gateway was not reached", async () => {
    const { url, seen } = await silentGateway("cut");
    const error = await run(url, KEY_COMMANDS["keys create"], { name: "ci" });
    expect(seen).toEqual(["POST /admin/v1/keys"]);
    expect({ exitCode: error.exitCode, message: error.message }).toEqual({
      exitCode: 1,
      message: "POST /admin/v1/keys: the connection closed before the answer (UND_ERR_SOCKET); the change may have been made: read it back (npx kvgate keys list) before sending it again",
    });
  });

  it("a read says the connection closed, not that the gateway was not reached", async () => {
    const { url, seen } = await silentGateway("cut");
    const error = await run(url, FLEET_COMMANDS.status, {});
    expect(seen).toEqual(["GET /admin/v1/status"]);
    expect(error.message).toBe("GET /admin/v1/status: the connection closed before the answer (UND_ERR_SOCKET)");
  });
});

describe("npx kvgate, a read the gateway did not answer in time", () => {
  it("says it timed out, exit 1: not that the gateway was not reached, nor that anything may have changed", async () => {
    const { url, seen } = await silentGateway();
    const error = await run(url, FLEET_COMMANDS.status, {});
    expect(seen).toEqual(["GET /admin/v1/status"]);
    expect({ exitCode: error.exitCode, message: error.message }).toEqual({ exitCode: 1, message: `GET /admin/v1/status: no answer within ${WAIT_MS / 1000} s` });
  });
});

describe("npx kvgate, a gateway that is not there", () => {
  it("still says it cannot be reached: nothing was sent", async () => {
    const url = `http://127.0.0.1:${await closedPort()}`;
    for (const command of [KEY_COMMANDS["keys create"], FLEET_COMMANDS.status]) {
      const error = await run(url, command, {});
      expect(error.message).toBe(`cannot reach the gateway at ${url} (ECONNREFUSED); is it running, and is KVGATE_URL right?`);
    }
  });
});

describe("npx kvgate, a KVGATE_URL on a port fetch will not connect to (6000, 10080, the Fetch standard's bad ports)", () => {
  it("is refused as a wrong setting, exit 2, before anything is sent: not a change that may have been made", async () => {
    for (const url of ["http://127.0.0.1:6000", "https://gateway.internal:10080/"]) {
      let error: unknown;
      try {
        adminClient({ KVGATE_URL: url, KVGATE_ADMIN_KEY: "admin-key" }, fetch, WAIT_MS);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(CliError);
      const port = new URL(url).port;
      expect({ exitCode: (error as CliError).exitCode, message: (error as CliError).message }).toEqual({
        exitCode: 2,
        message: `KVGATE_URL: port ${port} is one that browsers and fetch refuse to connect to (the Fetch standard's "bad ports"); serve the gateway on another port`,
      });
    }
  });

  it("a refusal fetch calls 'bad port' is said as a gateway not reached: fetch made no connection, so nothing was sent", async () => {
    // A port Node's fetch refuses that the CLI's own list would lack (a newer Node's list): the
    // request is handed to Node's fetch for port 6000, whatever KVGATE_URL's port.
    const refusing: typeof fetch = (_input, init) => fetch("http://127.0.0.1:6000/", init);
    const url = `http://127.0.0.1:${await closedPort()}`;
    const api = adminClient({ KVGATE_URL: url, KVGATE_ADMIN_KEY: "admin-key" }, refusing, WAIT_MS);
    const quiet = { out: () => undefined, note: () => undefined, sleep: async () => undefined };
    const error = await FLEET_COMMANDS["deployments remove"]?.(api, { group: "g", id: "a" }, quiet, []).then(() => null, (e: unknown) => e);
    expect(error).toBeInstanceOf(CliError);
    expect((error as CliError).message).toBe(`cannot reach the gateway at ${url} (bad port); is it running, and is KVGATE_URL right?`);
  });
});

describe("npx kvgate, a KVGATE_ADMIN_KEY no HTTP header can carry (a line break inside, a NUL, a character past U+00FF)", () => {
  it("is refused as a wrong setting, exit 2, on one line that never repeats the key: not a change that may have been made", async () => {
    const url = `http://127.0.0.1:${await closedPort()}`;
    // Two lines of a log grepped for the key, a pasted curly quote, a NUL from a binary file.
    for (const key of ["sk-a\nsk-b", "sk-a\r\nsk-b", "sk-a\u0000sk-b", "sk-a\u2019sk-b"]) {
      const stderr: string[] = [];
      const write = vi.spyOn(process.stderr, "write").mockImplementation((chunk: string | Uint8Array) => (stderr.push(String(chunk)), true));
      const exit = await main(["keys", "create"], { KVGATE_URL: url, KVGATE_ADMIN_KEY: key }, { out: () => undefined, note: () => undefined, sleep: async () => undefined }).finally(() => write.mockRestore());
      const written = stderr.join("");
      expect({ key, exit }).toEqual({ key, exit: 2 });
      expect(written, JSON.stringify(key)).not.toMatch(/sk-a|sk-b/);
      expect(written).not.toContain("may have been made");
      // One line, then the usage, as for any wrong setting.
      expect(written.endsWith(`\n${USAGE}\n`), written).toBe(true);
      expect(written.slice(0, -(USAGE.length + 1)).split("\n"), written).toEqual([expect.stringMatching(/^kvgate: KVGATE_ADMIN_KEY /), ""]);
    }
  });

  it("a fetch error that quotes the header it refused is said without the key", async () => {
    const quoting: typeof fetch = async (_input, init) => {
      throw new TypeError(`Headers.append: "${(init?.headers as Record<string, string>).authorization}" is an invalid header value.`);
    };
    const api = adminClient({ KVGATE_URL: "http://127.0.0.1:8787", KVGATE_ADMIN_KEY: "sk-admin-secret" }, quoting, WAIT_MS);
    const error = await api.call("GET", "/admin/v1/status").then(() => null, (e: unknown) => e);
    expect(error).toBeInstanceOf(CliError);
    expect((error as CliError).message).toBe('GET /admin/v1/status: the connection closed before the answer (Headers.append: "Bearer <KVGATE_ADMIN_KEY>" is an invalid header value.)');
  });

  it("sends a key with a line break or spaces around it as fetch would, trimmed: it still works", async () => {
    const seen: string[] = [];
    server = http.createServer((req, res) => {
      seen.push(req.headers.authorization ?? "");
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ object: "list", data: [], has_more: false }));
    });
    await new Promise<void>((resolve) => server?.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(server?.address() as AddressInfo).port}`;
    const api = adminClient({ KVGATE_URL: url, KVGATE_ADMIN_KEY: " admin-key\n" }, fetch, WAIT_MS);
    await api.call("GET", "/admin/v1/keys");
    expect(seen).toEqual(["Bearer admin-key"]);
  });
});
