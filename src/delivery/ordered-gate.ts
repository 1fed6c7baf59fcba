// The gate of an endpoint's keyed deliveries (issue 21): a delivery is attempted only when it is the
// oldest delivery of its key still stored. Work-queue retention removes an acked delivery and the
// dead-letter role removes a dead one, so the stream itself knows each key's head, whichever instance
// holds it and across restarts: no state of our own to lose or to agree on.
//
// A delivery behind its head is parked here: held in memory (the in-flight sweep keeps it from being
// redelivered, so waiting does not use up its attempts), not in a lane. One check per key at a time, for
// its lowest parked delivery: at once when an attempt of the key ends in this process, otherwise with
// backoff (the head is attempted elsewhere, or waits at the server for its retry, or for its dead letter).
import type { NextBySubject } from '../nats/next-by-subject.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { InFlight } from './in-flight.ts';
import type { RecentAcks } from './recent-acks.ts';

/** A parked key is looked at again after this long, doubling up to CHECK_MAX_MS while its head stays. */
export const CHECK_FIRST_MS = 250;
export const CHECK_MAX_MS = 5000;

export interface KeyGate {
  /** A keyed delivery arrived: `go` runs once it is its key's head (maybe at once); parked until then. */
  admit(tracked: InFlight, go: () => void): void;
  /** An attempt of the delivery `tracked`, let through by admit, ended in this process. */
  ended(tracked: InFlight): void;
  /** Deliveries parked behind their key's head. */
  parked(): number;
  /** Stop: parked deliveries are let go (the server hands them out again after their ack wait). */
  close(): void;
}

interface Key {
  /** Parked deliveries, lowest sequence first. */
  parked: InFlight[];
  /** Sequences let through and not yet ended in this process. */
  active: Set<number>;
  checking: boolean;
  timer: NodeJS.Timeout | undefined;
  delay: number;
}

export function createKeyGate(deps: {
  /** Asks the stream for a key's oldest stored delivery. */
  heads: NextBySubject;
  stream: string;
  /** 2xx deliveries of this process whose ack may still be on its way: not a head any more. */
  recentAcks: RecentAcks;
  /** What the sweep keeps alive; a parked delivery stays in it. */
  inFlight: Set<InFlight>;
  endpoint: string;
  log: Logger;
}): KeyGate {
  const { heads, stream, recentAcks } = deps;
  const keys = new Map<string, Key>();
  const go = new Map<InFlight, () => void>();
  let parkedCount = 0;
  let closed = false;

  /**
   * `head` when no delivery of `subject` older than `seq` is still stored, but those this process got a
   * 2xx for; `gone` when `seq` itself is no longer stored (erased, issue 22: it must not be sent).
   */
  async function headOf(subject: string, seq: number): Promise<'head' | 'behind' | 'gone'> {
    for (let from = 0; ;) {
      const stored = await heads.next(stream, subject, from);
      if (stored === null || stored > seq) return 'gone';
      if (stored === seq) return 'head';
      if (!recentAcks.acked(stream, stored)) return 'behind';
      from = stored + 1;
    }
  }

  function later(subject: string, k: Key): void {
    if (k.timer || closed) return;
    k.timer = setTimeout(() => {
      k.timer = undefined;
      void check(subject);
    }, k.delay);
    k.delay = Math.min(CHECK_MAX_MS, k.delay * 2);
  }

  async function check(subject: string): Promise<void> {
    const k = keys.get(subject);
    if (!k || k.checking || closed) return;
    const lowest = k.parked[0];
    if (!lowest) {
      if (k.active.size === 0) { clearTimeout(k.timer); keys.delete(subject); }
      return;
    }
    // An attempt of the key runs here: its end checks again.
    if (k.active.size > 0) return;
    k.checking = true;
    let head: 'head' | 'behind' | 'gone';
    try {
      head = await headOf(subject, lowest.msg.seq);
    } catch (e) {
      deps.log.warn('could not read the head of an ordering key; looking again shortly', { endpoint: deps.endpoint, reason: describe(e) });
      head = 'behind';
    } finally {
      k.checking = false;
    }
    if (closed) return;
    // A lower delivery arrived meanwhile: that one is the candidate now.
    if (k.parked[0] !== lowest) return void check(subject);
    if (head === 'behind') return later(subject, k);
    k.parked.shift();
    parkedCount--;
    if (head === 'gone') {
      // Erased while parked: dropped unsent (the server has nothing left to hand out again).
      deps.inFlight.delete(lowest);
      go.delete(lowest);
      lowest.msg.term();
      return void check(subject);
    }
    k.active.add(lowest.msg.seq);
    k.delay = CHECK_FIRST_MS;
    const release = go.get(lowest);
    go.delete(lowest);
    release?.();
  }

  return {
    admit(tracked, release) {
      const subject = tracked.msg.subject;
      let k = keys.get(subject);
      if (!k) keys.set(subject, (k = { parked: [], active: new Set(), checking: false, timer: undefined, delay: CHECK_FIRST_MS }));
      // A redelivery of a parked delivery (its ack wait ran out anyway) replaces the old copy.
      const seq = tracked.msg.seq;
      const at = k.parked.findIndex((p) => p.msg.seq >= seq);
      if (at >= 0 && k.parked[at]!.msg.seq === seq) {
        deps.inFlight.delete(k.parked[at]!);
        go.delete(k.parked[at]!);
        k.parked[at] = tracked;
      } else {
        k.parked.splice(at < 0 ? k.parked.length : at, 0, tracked);
        parkedCount++;
      }
      go.set(tracked, release);
      void check(subject);
    },
    ended(tracked) {
      const subject = tracked.msg.subject;
      const k = keys.get(subject);
      if (!k?.active.delete(tracked.msg.seq)) return;
      clearTimeout(k.timer);
      k.timer = undefined;
      k.delay = CHECK_FIRST_MS;
      void check(subject);
    },
    parked: () => parkedCount,
    close() {
      closed = true;
      for (const k of keys.values()) {
        clearTimeout(k.timer);
        for (const t of k.parked) deps.inFlight.delete(t);
      }
      keys.clear();
      go.clear();
      parkedCount = 0;
    },
  };
}
