/** A failure the CLI reports in one line and a non-zero exit: 2 for a wrong command line, 1 for the rest. */
export class CliError extends Error {
  readonly exitCode: 1 | 2;

  constructor(message: string, exitCode: 1 | 2 = 1) {
    super(message);
    this.exitCode = exitCode;
  }
}
