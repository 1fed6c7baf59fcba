// Warnings that repeat per key (an endpoint whose every attempt fails, whose deliveries die one after
// another) said once, then at most once an interval with how many were quieter; the rest go to debug
// (issue 23: a receiver failing 1,000 attempts wrote 1,000 lines). Counters in metrics keep every one.
// State is kept only for keys warned about within the last two intervals (a key still warned about is
// warned about every interval): memory follows the keys that are failing now, not every key that ever did.
import type { Fields, Logger } from './log.ts';

export interface SampledWarnings {
  /** Warn for `key` the first time and once per interval after (with `quieter`: lines at debug since); debug otherwise. */
  warn(key: string, msg: string, fields: Fields): void;
  /** `key` is well again: the next warning is said at once. Returns how many warnings it had since the first, if any. */
  clear(key: string): number | undefined;
}

interface KeyState {
  /** When the key was last warned about (monotonic ms). */
  warnedAt: number;
  /** Warnings at debug since then. */
  quieter: number;
  /** Warnings since the first. */
  total: number;
}

export function createSampledWarnings(log: Logger, opts: { intervalMs: number; now?: () => number }): SampledWarnings {
  const now = opts.now ?? (() => performance.now());
  const keys = new Map<string, KeyState>();
  let sweptAt = now();

  /** Drop keys with no warning for over an interval: their next warning is a first one. */
  function sweep(t: number): void {
    if (t - sweptAt < opts.intervalMs) return;
    sweptAt = t;
    for (const [key, s] of keys) if (t - s.warnedAt >= 2 * opts.intervalMs) keys.delete(key);
  }

  return {
    warn(key, msg, fields) {
      const t = now();
      sweep(t);
      const s = keys.get(key);
      if (!s) {
        keys.set(key, { warnedAt: t, quieter: 0, total: 1 });
        log.warn(msg, fields);
        return;
      }
      s.total++;
      if (t - s.warnedAt < opts.intervalMs) {
        s.quieter++;
        log.debug(msg, fields);
        return;
      }
      log.warn(msg, { ...fields, quieter: s.quieter });
      s.warnedAt = t;
      s.quieter = 0;
    },
    clear(key) {
      const s = keys.get(key);
      if (!s) return undefined;
      keys.delete(key);
      return s.total;
    },
  };
}
