// How many attempts one endpoint gets at once in this process.
// - 429s: additive increase, multiplicative decrease. A 429 halves the limit (down to 1), each 2xx raises
//   it by one (up to the configured maximum). Only an attempt sent under the current limit can lower it
//   again, so one burst of 429s answering attempts that were all in flight together halves it once.
// - Every other failure (5xx, timeouts, refused connections): after PROBE_AFTER in a row with no 2xx between
//   them, the endpoint is probed one attempt at a time, so a dead receiver costs one attempt per attempt
//   time instead of the full bound (issue 17); its first 2xx opens the limit again at once.
export interface ConcurrencyLimit {
  readonly current: number;
  /** One attempt at a time until the next 2xx. */
  readonly probing: boolean;
  /** The endpoint answered 429 to an attempt started at `startedAt` (a monotonic clock, used consistently). */
  throttled(startedAt: number, now: number): void;
  /** Any other failed attempt. */
  failed(): void;
  succeeded(): void;
}

/** Failures in a row before an endpoint is probed one attempt at a time. */
export const PROBE_AFTER = 3;

export function createConcurrencyLimit(max: number): ConcurrencyLimit {
  let current = max;
  let loweredAt = -Infinity;
  let failures = 0;
  return {
    get current() { return failures >= PROBE_AFTER ? 1 : current; },
    get probing() { return failures >= PROBE_AFTER; },
    throttled(startedAt, now) {
      if (startedAt < loweredAt || current === 1) return;
      current = Math.max(1, Math.floor(current / 2));
      loweredAt = now;
    },
    failed() {
      failures++;
    },
    succeeded() {
      // Leaving probing restores the limit the 429s left; otherwise one more.
      if (failures < PROBE_AFTER && current < max) current++;
      failures = 0;
    },
  };
}
