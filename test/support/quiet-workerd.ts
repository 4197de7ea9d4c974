import { dropWorkerdNoise } from "./workerd-noise.ts";

/**
 * The Workers project's global setup, run in vitest's own process, where the Workers test pool
 * writes workerd's log records: from here to the end of the run, expected noise is dropped
 * (test/support/workerd-noise.ts). KVGATE_TEST_LOGS=1 shows every record.
 */
export default function setup(): () => void {
  if (process.env.KVGATE_TEST_LOGS === "1") return () => {};
  const stops = [dropWorkerdNoise(process.stdout), dropWorkerdNoise(process.stderr)];
  return () => {
    for (const stop of stops) stop();
  };
}
