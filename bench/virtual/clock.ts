import { install } from "@sinonjs/fake-timers";

/** Timers that never fire on their own: a run of every one of them, in order, takes no wall time. */
const FAKED = ["setTimeout", "clearTimeout", "setImmediate", "clearImmediate", "setInterval", "clearInterval", "Date"] as const;
/** Far above any replay's timers (a 2-minute Mooncake slice sets ~100k); a bound so a bug that re-arms forever ends in an error. */
const LOOP_LIMIT = 50_000_000;

export interface VirtualClock {
  /** ms since the run began. */
  now(): number;
}

/**
 * Runs `start` with the process's timers and Date replaced by a virtual clock, then fires every
 * timer it and its callbacks set, in time order, until none is left: the simulator's engine, the
 * replay's arrivals and the gateway's lease timers all run at virtual time, so a run's result
 * depends only on its inputs, never on how busy this machine was. Everything `start` sets going
 * must be synchronous (no promises, no I/O): the clock jumps from one timer to the next. One
 * rule is the library's, not Node's: a zero-delay timer or setImmediate set inside a timer fires
 * 1 ms later (the engine's wake after an idle spell, well under the HTTP path's own time).
 */
export function inVirtualTime<T>(start: (clock: VirtualClock) => () => T): T {
  const clock = install({ now: 0, toFake: [...FAKED], loopLimit: LOOP_LIMIT, shouldClearNativeTimers: false });
  try {
    const finish = start({ now: () => clock.now });
    clock.runAll();
    return finish();
  } finally {
    clock.uninstall();
  }
}
