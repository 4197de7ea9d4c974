/**
 * The Workers test pool runs workerd with --verbose and writes each of its log records, one write
 * per record, to the test run's stdout or stderr. Verbose workerd logs every exception the runtime
 * sees, caught or not, and most of them are connections the tests break on purpose: a dead
 * upstream, a stream cut mid-way, a client that leaves. A broken connection is a kj exception of
 * type `disconnected`, which JavaScript sees as "Network connection lost.". Those records, and the
 * warnings workerd itself marks as no error (NOSENTRY: an alarm run a few ms late), are dropped.
 * Everything else still prints: the Worker's console, and an exception of any other type (a
 * `failed` one: a Worker's own error, a throwing alarm, a rejected waitUntil). Without --verbose
 * workerd would say nothing of those, so the pool's verbosity stays and only the noise goes.
 */

/** One log record as the pool writes it: the record's message (which may span lines) and "\n". */
export function isWorkerdNoise(record: string): boolean {
  return (
    /^(?:uncaught exception; )?exception = \S+: disconnected: /.test(record) ||
    record === "uncaught exception; source = Uncaught (in promise); stack = Error: Network connection lost.\n" ||
    record.startsWith("NOSENTRY ")
  );
}

type Write = NodeJS.WritableStream["write"];
type Done = (error?: Error | null) => void;

/** Drops workerd's noise from what is written to `stream`; returns the function that stops it. */
export function dropWorkerdNoise(stream: NodeJS.WritableStream): () => void {
  const write = stream.write as (this: NodeJS.WritableStream, ...args: unknown[]) => boolean;
  const filtered = function (this: NodeJS.WritableStream, ...args: unknown[]): boolean {
    const [chunk] = args;
    if (typeof chunk === "string" && isWorkerdNoise(chunk)) {
      // Written as far as the caller can tell: its callback, if any, still runs.
      const done = args.find((a): a is Done => typeof a === "function");
      if (done) process.nextTick(done);
      return true;
    }
    return write.apply(this, args);
  };
  stream.write = filtered as Write;
  return () => {
    stream.write = write as Write;
  };
}
