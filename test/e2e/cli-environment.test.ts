import { spawn } from "node:child_process";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { describe, expect, it } from "vitest";
import { ROOT } from "../support/run-script.ts";
import { kvgate } from "./npm-start-cli.ts";

/** `npx kvgate` as typed, with a KVGATE_URL it cannot use: what it says, and what it does not repeat. */

describe("npx kvgate with credentials in KVGATE_URL", () => {
  it("refuses it as a wrong command line, and never writes the password out", async () => {
    const password = "pw-never-printed-7f3a";
    for (const url of [`http://ops:${password}@127.0.0.1:9`, `https://ops:${password}@gateway.example`, `ftp://ops:${password}@gateway.example`]) {
      const r = await kvgate(["status"], { KVGATE_URL: url, KVGATE_ADMIN_KEY: "sk-admin-unused" });
      expect({ url, code: r.code, stdout: r.stdout }).toEqual({ url, code: 2, stdout: "" });
      expect(r.stderr[0]).toBe("kvgate: KVGATE_URL must not carry credentials (user:password@): the admin key goes in KVGATE_ADMIN_KEY");
      expect(r.stderr.join("\n")).not.toContain(password);
    }
  }, 60_000);

  it("writes the password out no more when the URL around it does not parse, or has no scheme", async () => {
    const password = "pw-never-printed-9c1e";
    // A space in the host, a port past 65535, no scheme at all: URL.parse finds no credentials in these.
    for (const url of [`http://ops:${password}@gate way.example`, `https://ops:${password}@gateway.example:99999`, `ops:${password}@gateway.example`]) {
      const r = await kvgate(["status"], { KVGATE_URL: url, KVGATE_ADMIN_KEY: "sk-admin-unused" });
      expect({ url, code: r.code, stdout: r.stdout }).toEqual({ url, code: 2, stdout: "" });
      expect(r.stderr[0]).toMatch(/^kvgate: KVGATE_URL must be an http\(s\) URL/);
      expect(r.stderr.join("\n")).not.toContain(password);
    }
  }, 60_000);
});

describe("npx kvgate with a KVGATE_URL that is some other JSON server", () => {
  it("says in one line that the answer is not a gateway's, with no stack, and exits 1", async () => {
    // Answers 200 and an empty object to anything, as another service's API might.
    const other = http.createServer((req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
    await new Promise<void>((done) => other.listen(0, "127.0.0.1", done));
    try {
      const url = `http://127.0.0.1:${(other.address() as AddressInfo).port}`;
      for (const args of [["status"], ["groups", "list"], ["deployments", "list", "--group", "g"]]) {
        const r = await kvgate(args, { KVGATE_URL: url, KVGATE_ADMIN_KEY: "sk-admin-unused" });
        expect({ args, code: r.code, lines: r.stderr.length }).toEqual({ args, code: 1, lines: 1 });
        expect(r.stderr[0]).toMatch(/^kvgate: .*not what a kvgate gateway answers.*KVGATE_URL/);
      }
    } finally {
      other.close();
    }
  }, 60_000);
});

describe("npx kvgate behind a proxy that answers an error page", () => {
  it("says so in one printable line, exit 1: the page's line breaks and escape sequences are not written to the terminal", async () => {
    // A proxy's 502 page, CRLF line endings and an escape sequence (ESC [2J clears the screen) in it.
    const page = "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\u001b[2Jupstream went away\r\n</body>\r\n</html>\r\n";
    const proxy = http.createServer((req, res) => {
      req.resume();
      res.writeHead(502, "Bad Gateway", { "content-type": "text/html" }).end(page);
    });
    await new Promise<void>((done) => proxy.listen(0, "127.0.0.1", done));
    try {
      const url = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
      for (const args of [["status"], ["keys", "revoke", "key_x"]]) {
        const r = await kvgate(args, { KVGATE_URL: url, KVGATE_ADMIN_KEY: "sk-admin-unused" });
        expect({ args, code: r.code, stdout: r.stdout, stderr: r.stderr }).toEqual({
          args,
          code: 1,
          stdout: "",
          stderr: [expect.stringMatching(/^kvgate: (GET|POST) \/admin\/v1\/\S+: answered 502 Bad Gateway, not JSON: is KVGATE_URL a kvgate gateway\?$/)],
        });
        expect(r.stderr.join("\n")).not.toMatch(/[\u0000-\u001f\u007f-\u009f]/);
      }
    } finally {
      proxy.close();
    }
  }, 60_000);
});

describe("npx kvgate with a plain http KVGATE_URL on a public host", () => {
  it("refuses it as a wrong command line before anything is sent: the admin key would cross the internet in cleartext", async () => {
    // A server on this machine that public DNS (stood in for by the preload) says is gateway.example.
    const seen: (string | undefined)[] = [];
    const server = http.createServer((req, res) => {
      seen.push(req.headers.authorization);
      req.resume();
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    const port = (server.address() as AddressInfo).port;
    const preload = { NODE_OPTIONS: `--import ${new URL("../fixtures/public-name-on-loopback.mjs", import.meta.url).href}`, KVGATE_TEST_PUBLIC_NAME: "gateway.example" };
    const adminKey = "sk-admin-never-in-cleartext-4b7d";
    try {
      const r = await kvgate(["status"], { KVGATE_URL: `http://gateway.example:${port}`, KVGATE_ADMIN_KEY: adminKey, ...preload });
      expect({ code: r.code, stdout: r.stdout, keySent: seen.includes(`Bearer ${adminKey}`), requests: seen.length }).toEqual({ code: 2, stdout: "", keySent: false, requests: 0 });
      expect(r.stderr[0]).toMatch(/^kvgate: KVGATE_URL is plain http to a public host \(gateway\.example\): the admin key would cross the internet in cleartext; use https:\/\/.*KVGATE_ALLOW_PLAIN_HTTP=1/);
      // The same server as a private network's or this machine's: plain http is the operator's call there.
      const local = await kvgate(["status"], { KVGATE_URL: `http://127.0.0.1:${port}`, KVGATE_ADMIN_KEY: adminKey });
      expect(local.stderr[0]).toMatch(/not what a kvgate gateway answers/);
      expect(seen).toEqual([`Bearer ${adminKey}`]);
      // A private network's name only its own DNS knows (kvgate.lan) looks public by its name: the operator says it is not.
      const named = await kvgate(["status"], { KVGATE_URL: `http://gateway.example:${port}`, KVGATE_ADMIN_KEY: adminKey, KVGATE_ALLOW_PLAIN_HTTP: "1", ...preload });
      expect(named.stderr[0]).toMatch(/not what a kvgate gateway answers/);
      expect(seen).toEqual([`Bearer ${adminKey}`, `Bearer ${adminKey}`]);
    } finally {
      server.close();
    }
  }, 60_000);
});

describe("npx kvgate piped into a reader that stops reading (| head, less quit early)", () => {
  it("exits 0 and writes nothing to stderr: the reader closing the pipe is not the command failing", async () => {
    // A big fleet's export: well past a pipe's buffer, so the CLI is still writing when the reader goes.
    const groups = Array.from({ length: 400 }, (_, i) => ({ name: `g${i}`, deployments: Array.from({ length: 4 }, (_, j) => ({ id: `d${j}`, baseUrl: `https://gpu${i}-${j}.example.com`, model: `m${i}` })) }));
    const fleet = JSON.stringify({ rev: 1, modelGroups: groups });
    expect(fleet.length).toBeGreaterThan(100_000);
    const server = http.createServer((req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "application/json" }).end(fleet);
    });
    await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
    try {
      const env = { ...process.env, KVGATE_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, KVGATE_ADMIN_KEY: "sk-admin-unused" };
      const child = spawn(process.execPath, ["bin/kvgate.ts", "fleet", "export"], { cwd: ROOT, env, stdio: ["ignore", "pipe", "pipe"] });
      let stderr = "";
      child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
      // As head -c 20 does: the first bytes read, then the pipe closed.
      child.stdout.once("data", () => child.stdout.destroy());
      const code = await new Promise<number | null>((done) => child.once("close", done));
      expect(stderr).not.toMatch(/node:events|^ {4}at /m);
      expect({ code, stderr }).toEqual({ code: 0, stderr: "" });
    } finally {
      server.close();
    }
  }, 60_000);

  it("keeps the command's own exit code when the reader of stderr has gone (2>&1 | head)", async () => {
    // A usage error: exit 2 and its message on stderr, which nobody reads any more.
    const child = spawn(process.execPath, ["bin/kvgate.ts", "no-such-command"], { cwd: ROOT, env: { ...process.env, KVGATE_URL: "http://127.0.0.1:9", KVGATE_ADMIN_KEY: "sk-admin-unused" }, stdio: ["ignore", "ignore", "pipe"] });
    child.stderr.destroy();
    const code = await new Promise<number | null>((done) => child.once("close", done));
    expect(code).toBe(2);
  }, 60_000);
});
