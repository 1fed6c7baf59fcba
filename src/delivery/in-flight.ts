// Messages this process holds for an endpoint, and the one sweep that keeps them from being redelivered
// while held: waiting for a lane or a rate-limit token, or in their attempt.
import type { PulledMsg } from '../nats/pulled-msg.ts';

export interface InFlight {
  msg: PulledMsg;
  /** When the message was last marked working (or received), on the monotonic clock. */
  touched: number;
  /** The server's wait before it redelivers this delivery: its backoff step. */
  wait: number;
}

/**
 * The sweep's tick: a quarter of the shortest wait (backoff[0]), at most 250 ms, so a held message is
 * marked working twice per wait even when the event loop runs late; messages now wait for a slot or keep
 * one for a second, far longer than a short schedule's first step.
 */
const sweepEvery = (firstStep: number) => Math.max(20, Math.min(250, Math.floor(firstStep / 4)));

/**
 * One sweep for all held messages: an attempt that outlives its wait would otherwise be delivered again
 * while still running (on nats-server 2.9, working() resets the wait to the current backoff step).
 * Returns the function that stops it.
 */
export function startSweep(inFlight: ReadonlySet<InFlight>, firstStep: number): () => void {
  const sweep = setInterval(() => {
    const now = performance.now();
    for (const f of inFlight) {
      if (now - f.touched > f.wait / 2) {
        f.msg.working();
        f.touched = now;
      }
    }
  }, sweepEvery(firstStep));
  sweep.unref();
  return () => clearInterval(sweep);
}
