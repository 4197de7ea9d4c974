import { execFile } from "node:child_process";
import { chmod, copyFile, mkdir, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { ROOT } from "../support/run-script.ts";
import { useTempDir } from "../support/temp-dir.ts";

const run = promisify(execFile);
const dir = useTempDir("kvgate-ci-run-");

/**
 * `.ci/run` on a fresh Debian machine: what it asks apt-get for. The machine is stood in for by
 * commands on PATH — apt-get writes down what it was asked, python3 has or lacks venv, npm and npx
 * do nothing — and the script runs from a copy, so nothing of this checkout is touched.
 */
async function ciRun(python: { venv: boolean }): Promise<string[]> {
  const repo = join(dir(), python.venv ? "with-venv" : "without-venv");
  const bin = join(repo, "stub-bin");
  const asked = join(repo, "apt-get.log");
  await mkdir(join(repo, ".ci"), { recursive: true });
  await mkdir(bin, { recursive: true });
  await copyFile(join(ROOT, ".ci", "run"), join(repo, ".ci", "run"));
  const stubs: Record<string, string> = {
    "apt-get": `echo "$*" >> '${asked}'`,
    sudo: `exec "$@"`,
    // Debian's python3 without python3-venv: no ensurepip, so `python3 -m venv` fails.
    python3: python.venv ? "exit 0" : "exit 1",
    npm: "exit 0",
    npx: "exit 0",
    timeout: "exit 0",
  };
  for (const [name, body] of Object.entries(stubs)) {
    await writeFile(join(bin, name), `#!/bin/sh\n${body}\n`);
    await chmod(join(bin, name), 0o755);
  }
  await writeFile(asked, "");
  await run("bash", [join(repo, ".ci", "run")], { env: { PATH: `${bin}:/usr/bin:/bin`, HOME: repo } });
  return (await readFile(asked, "utf8")).split("\n").filter((l) => l !== "");
}

describe(".ci/run", () => {
  it("installs python3 with venv when the machine lacks it: test/e2e/python.ts makes test/.venv with it for the Python SDK's tests", async () => {
    const asked = await ciRun({ venv: false });
    const install = asked.find((l) => l.includes("install"));
    expect(install, asked.join("\n")).toBeDefined();
    expect(install?.split(" ")).toEqual(expect.arrayContaining(["python3", "python3-venv"]));
  });

  it("asks apt-get for nothing python needs when python3 has venv", async () => {
    const asked = await ciRun({ venv: true });
    expect(asked.join("\n")).not.toContain("python3");
  });
});
