// Messages this process holds for an endpoint, and the one sweep that keeps them from being redelivered
// while held: waiting for a slot, in their attempt, or keeping a rate-limit slot.
import type { JsMsg } from '@nats-io/jetstream';

export interface InFlight {
  msg: JsMsg;
  /** When the message was last marked working (or received). */
  touched: number;
  /** The server's wait before it redelivers this delivery: its backoff step. */
  wait: number;
}

/**
 * How long a rate-limited endpoint's slot stays taken after its attempt ended. Counted from the end (the
 * answer came back, so the request had arrived), not from the send: the receiver, not only the sender,
 * never sees more than the limit in any second, whatever the network's jitter.
 */
export const RATE_LIMIT_HOLD_MS = 1000;

/** Keep a rate-limited slot until a second after the attempt ended (the sweep keeps the message alive). */
export async function holdSlot(endedAt: number): Promise<void> {
  const left = endedAt + RATE_LIMIT_HOLD_MS - Date.now();
  if (left > 0) await new Promise<void>((r) => setTimeout(r, left));
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
    const now = Date.now();
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
