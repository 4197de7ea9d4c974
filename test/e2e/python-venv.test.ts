import { chmod, mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { useTempDir } from "../support/temp-dir.ts";
import { ensurePython } from "./python.ts";

const dir = useTempDir("kvgate-python-venv-");

/**
 * The Python SDK's tests (metrics, stream-errors) on a machine that cannot make test/.venv: they
 * fail, as they must (no silent skip), but with a line that says what the machine lacks, not
 * python's traceback. The machine is stood in for by a python3 on PATH; the venv goes to a
 * temporary folder, so test/.venv is not touched.
 */
async function failureOf(python3: string): Promise<string> {
  const bin = join(dir(), "bin");
  await mkdir(bin, { recursive: true });
  await writeFile(join(bin, "python3"), `#!/bin/sh\n${python3}\n`);
  await chmod(join(bin, "python3"), 0o755);
  const error = await ensurePython(join(dir(), "venv"), { ...process.env, PATH: `${bin}:/usr/bin:/bin` }).then(() => null, (e: unknown) => e);
  expect(error).toBeInstanceOf(Error);
  return (error as Error).message;
}

/**
 * What Debian's python3 prints, and where, when python3-venv is not installed: its venv module's
 * own text (/usr/lib/python3.11/venv/__init__.py, Debian's patch), several lines on stdout, the
 * last naming the venv's python ("$3" is the folder `python3 -m venv` was given).
 */
const DEBIAN_WITHOUT_VENV = `cat <<EOF
The virtual environment was not created successfully because ensurepip is not
available.  On Debian/Ubuntu systems, you need to install the python3-venv
package using the following command.

    apt install python3.11-venv

You may need to use sudo with that command.  After installing the python3-venv
package, recreate your virtual environment.

Failing command: $3/bin/python3

EOF
exit 1`;

describe("the Python SDK's tests on a machine that cannot make their virtualenv", () => {
  it("fail saying python3-venv is missing when python3 has no venv (Debian leaves ensurepip out), whichever stream python writes it to", async () => {
    for (const python3 of [DEBIAN_WITHOUT_VENV, DEBIAN_WITHOUT_VENV.replace("cat <<EOF", "cat >&2 <<EOF")]) {
      const message = await failureOf(python3);
      expect(message).toMatch(/^the Python SDK's tests need python3 with venv \(Debian, Ubuntu: apt-get install python3-venv; \.ci\/run installs it\), and PyPI on their first run: python3 -m venv failed: ensurepip is missing$/);
    }
  });

  it("quote python's own error when venv is there but its ensurepip step failed (a full disk, a noexec mount): no python3-venv would mend that", async () => {
    const failedStep = `echo "Error: Command '['$3/bin/python3', '-m', 'ensurepip', '--upgrade', '--default-pip']' returned non-zero exit status 1." >&2; exit 1`;
    const message = await failureOf(failedStep);
    expect(message).toMatch(/python3 -m venv failed: Error: Command '\[.*'ensurepip'.*\]' returned non-zero exit status 1\.$/);
    expect(message).not.toContain("ensurepip is missing");
  });

  it("fail saying PyPI is needed when pip cannot install the requirements", async () => {
    // A python3 whose venv is made (a python in it that fails as pip does offline).
    const venvPython = `mkdir -p "$3/bin"; printf '#!/bin/sh\\necho "ERROR: Could not find a version that satisfies the requirement openai==3.54.0" >&2; exit 1\\n' > "$3/bin/python"; chmod 755 "$3/bin/python"`;
    const message = await failureOf(venvPython);
    expect(message).toMatch(/^the Python SDK's tests need python3 with venv .*, and PyPI on their first run: pip could not install test\/python\/requirements\.txt: ERROR: Could not find a version that satisfies the requirement openai==3\.54\.0$/);
  });
});
