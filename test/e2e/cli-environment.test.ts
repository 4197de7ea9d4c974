import { describe, expect, it } from "vitest";
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
});
