// When the next attempt of a failed delivery happens, and the nak that makes JetStream keep to it.
// Measured on nats-server 2.9.10 and 2.15.1 (issue 17):
//   - nak(d) on a consumer with backoff waits d + step - backoff[0] (the two add up), where `step` is the
//     backoff step of the delivery's count;
//   - left unacked instead, 2.9.10 redelivers only when its one pending timer fires, and that timer is not
//     brought forward for a delivery whose step is shorter than the one it was set for: a delivery failed
//     on its first attempt (1 s step) waited behind another's 30 s step. A nak with a delay re-arms it.
// So every failed attempt is nak'd with a delay: each delivery keeps its own schedule, counted from the end
// of its failed attempt, and the consumer's backoff remains the schedule of a delivery whose process died
// mid-attempt (no nak ever came).

export const NextAttemptBy = { Schedule: 'schedule', RetryAfter: 'retry_after' } as const;
export type NextAttemptBy = (typeof NextAttemptBy)[keyof typeof NextAttemptBy];

export interface NextAttemptInput {
  /** When the attempt ended. */
  now: number;
  /** The backoff step for this delivery count (the schedule's own next delay). */
  step: number;
  /** backoff[0] of the consumer. */
  firstStep: number;
  /** The receiver's Retry-After in ms from now, already capped; undefined when none applies. */
  retryAfterMs?: number;
}

export interface NextAttemptPlan {
  /** The nak's delay. */
  delayMs: number;
  /** When the next attempt is due (same clock as `now`). */
  at: number;
  by: NextAttemptBy;
}

export function planNextAttempt(i: NextAttemptInput): NextAttemptPlan {
  const wait = Math.max(i.step, i.retryAfterMs ?? 0);
  const by = wait === i.step ? NextAttemptBy.Schedule : NextAttemptBy.RetryAfter;
  // wait >= step, so the delay is at least backoff[0]: never a plain (immediate) nak.
  return { delayMs: Math.ceil(wait - i.step + i.firstStep), at: i.now + wait, by };
}
