// Messages this process holds for an endpoint, and the one sweep that keeps them from being redelivered
// while held: waiting for a lane or a rate-limit token, or in their attempt.
import type { PulledMsg } from '../nats/pulled-msg.ts';

export interface InFlight {
  msg: PulledMsg;
  /** When the message was last marked working (or received), on the monotonic clock. */
  touched: number;
  /** The server's wait before it redelivers this delivery: its backoff step. */
  wait: number;
  /**
   * The delivery count of a copy the server handed out again while this one was held (left to this one):
   * the copy counted toward the message's max deliveries, so this attempt may be its last.
   */
  handedOut?: number;
}

/**
 * The messages held, also found by the stream message they are: a server can hand one out again while
 * it is held here (nats-server 2.9.10 did, twice within milliseconds, after a stopping instance's nak
 * and the message's ack wait fell together), and a second attempt at once would POST it twice.
 */
export class HeldMessages extends Set<InFlight> {
  readonly #byMessage = new Map<string, InFlight>();

  override add(f: InFlight): this {
    this.#byMessage.set(messageKey(f.msg), f);
    return super.add(f);
  }

  override delete(f: InFlight): boolean {
    const key = messageKey(f.msg);
    if (this.#byMessage.get(key) === f) this.#byMessage.delete(key);
    return super.delete(f);
  }

  /** The held delivery of the same stream message as `m`, if any. */
  holding(m: PulledMsg): InFlight | undefined {
    return this.#byMessage.get(messageKey(m));
  }
}

/** A message as one consumer has it (a partition stream's is read by every endpoint of its tenants). */
const messageKey = (m: PulledMsg) => `${m.seq} ${m.info.consumer} ${m.info.stream}`;

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
