/** A failure the CLI reports in one line and a non-zero exit: 2 for a wrong command line, 1 for the rest. */
export class CliError extends Error {
  readonly exitCode: 1 | 2;
  /** The gateway could not answer for a moment (not reached in time, or a 502, 503 or 504): the same call may succeed soon. */
  readonly passing: boolean;

  constructor(message: string, exitCode: 1 | 2 = 1, passing = false) {
    super(message);
    this.exitCode = exitCode;
    this.passing = passing;
  }
}
