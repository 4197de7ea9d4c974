/**
 * What goes wrong, to which worker, and when: one fault per worker of a 4-worker fleet, at fixed
 * fractions of the run so `--quick` sees the same story in a quarter of the time. Times count from
 * the start of the load (the fleet's fault clock is held until then).
 *
 *   0 ─ dies ──────────── at 1/6: port closed, every connection cut, never back
 *   1 ─ turns slow ────── from 1/4: every GPU step 4× longer
 *   2 ─ returns 500s ──── from 1/3: every inference request answered 500
 *   3 ─ flaps ─────────── from 5/12: down 1/30 (connection refused), up 1/15, three times;
 *                         last back up at 39/60, then healthy to the end
 */
import type { FaultKnobs, WorkerFaults } from "../fleet/index.ts";

export type Role = "dies" | "slow" | "errors" | "flaps";

export interface ScheduledFault {
  worker: number;
  role: Role;
  knobs: Partial<FaultKnobs>;
  /** One line for the report. */
  text: string;
}

const SLOW_FACTOR = 4;
const FLAP_CYCLES = 3;

export function chaosSchedule(durationMs: number): ScheduledFault[] {
  const t = (fraction: number): number => Math.round(durationMs * fraction);
  const flapFrom = t(5 / 12);
  const down = t(1 / 30);
  const up = t(1 / 15);
  const s = (ms: number): string => `${(ms / 1000).toFixed(ms % 1000 === 0 ? 0 : 2)} s`;
  return [
    { worker: 0, role: "dies", knobs: { dieAtMs: t(1 / 6) }, text: `dies at ${s(t(1 / 6))}: closes its port and cuts every connection, for good` },
    {
      worker: 1,
      role: "slow",
      knobs: { onsetMs: t(1 / 4), slowFactor: SLOW_FACTOR },
      text: `turns slow at ${s(t(1 / 4))}: every GPU step ${SLOW_FACTOR}× longer`,
    },
    { worker: 2, role: "errors", knobs: { onsetMs: t(1 / 3), errorRate: 1 }, text: `returns 500 to every inference request from ${s(t(1 / 3))}` },
    {
      worker: 3,
      role: "flaps",
      knobs: { onsetMs: flapFrom, flapDownMs: down, flapUpMs: up, flapCycles: FLAP_CYCLES },
      text: `flaps from ${s(flapFrom)}: down ${s(down)} (connection refused, streams cut), up ${s(up)} (empty KV cache), ${FLAP_CYCLES} times; back for good at ${s(lastUpMs(durationMs))}`,
    },
  ];
}

/** When the flapping worker comes back up for the last time, on the fault clock. */
export function lastUpMs(durationMs: number): number {
  const t = (fraction: number): number => Math.round(durationMs * fraction);
  return t(5 / 12) + FLAP_CYCLES * t(1 / 30) + (FLAP_CYCLES - 1) * t(1 / 15);
}

export function fleetFaults(schedule: readonly ScheduledFault[]): WorkerFaults {
  return Object.fromEntries(schedule.map((f) => [f.worker, f.knobs]));
}
