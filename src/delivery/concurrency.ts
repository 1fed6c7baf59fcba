// How many attempts one endpoint gets at once in this process: additive increase, multiplicative decrease.
// A 429 halves the limit (down to 1), each 2xx raises it by one (up to the configured maximum). Only an
// attempt sent under the current limit can lower it again, so one burst of 429s answering attempts that
// were all in flight together halves it once, not once per answer.
export interface ConcurrencyLimit {
  readonly current: number;
  /** The endpoint answered 429 to an attempt started at `startedAt` (a monotonic or wall clock, used consistently). */
  throttled(startedAt: number, now: number): void;
  succeeded(): void;
}

export function createConcurrencyLimit(max: number): ConcurrencyLimit {
  let current = max;
  let loweredAt = -Infinity;
  return {
    get current() { return current; },
    throttled(startedAt, now) {
      if (startedAt < loweredAt || current === 1) return;
      current = Math.max(1, Math.floor(current / 2));
      loweredAt = now;
    },
    succeeded() {
      if (current < max) current++;
    },
  };
}
