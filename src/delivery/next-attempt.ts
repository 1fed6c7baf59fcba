// When the next attempt of a failed delivery happens, and how to make nats-server 2.9.10 keep to it.
// Pure arithmetic, measured on the real server (nats-server 2.9.10, re-checked for issue 10):
//   - left unacked, the message comes back `step` after it was delivered or last marked working();
//   - working() restarts that wait: `step` from now;
//   - nak(d) on a consumer with backoff waits d + step - backoff[0] (the two add up).
// `step` is the backoff step of the attempt's delivery count.

export const NextAttemptBy = { Schedule: 'schedule', RetryAfter: 'retry_after', RateLimit: 'rate_limit' } as const;
export type NextAttemptBy = (typeof NextAttemptBy)[keyof typeof NextAttemptBy];

export interface NextAttemptInput {
  now: number;
  /** When the server's wait for this delivery last (re)started: its delivery or the last working(). */
  touched: number;
  /** The backoff step for this delivery count (the schedule's own next delay). */
  step: number;
  /** backoff[0] of the consumer. */
  firstStep: number;
  /** The receiver's Retry-After in ms from now, already capped; undefined when none applies. */
  retryAfterMs?: number;
  /** Minimum wait from now for a rate-limited endpoint (its slot must stay held a second after the attempt). */
  floorMs?: number;
}

export type NextAttemptPlan =
  | { action: 'leave'; at: number; by: NextAttemptBy }
  | { action: 'working'; at: number; by: NextAttemptBy }
  | { action: 'nak'; delayMs: number; at: number; by: NextAttemptBy };

export function planNextAttempt(i: NextAttemptInput): NextAttemptPlan {
  const scheduled = i.touched + i.step;
  const retryAt = i.retryAfterMs === undefined ? -Infinity : i.now + i.retryAfterMs;
  const floorAt = i.floorMs === undefined ? -Infinity : i.now + i.floorMs;
  const due = Math.max(scheduled, retryAt, floorAt);
  if (due === scheduled) return { action: 'leave', at: scheduled, by: NextAttemptBy.Schedule };
  const by = retryAt >= floorAt ? NextAttemptBy.RetryAfter : NextAttemptBy.RateLimit;
  const wait = due - i.now;
  // working() can only give `step` from now; when that is enough it costs no delay arithmetic at all.
  if (wait <= i.step) return { action: 'working', at: i.now + i.step, by };
  // wait > step >= step - firstStep, so the delay is positive.
  return { action: 'nak', delayMs: Math.ceil(wait - i.step + i.firstStep), at: due, by };
}
