// The gate of an endpoint's keyed deliveries (issue 21): a delivery is attempted only when no delivery of
// its key with an earlier event (by EVENTS sequence, the `hookstream-event-seq` header) is still stored.
// Work-queue retention removes an acked delivery and the dead-letter role removes a dead one, so the
// stream itself knows what is left of each key, whichever instance holds it and across restarts.
//
// Storage order is not event order (a fan-out NATS failed part-way is published again seconds later, two
// routers race, the router's cover catch-up comes late), so two things are read before a delivery of
// event S goes: the router's floor (router-floor.ts) at the delivery's barrier or more (S-1, or what the
// router stamped: src/router/tenant-progress.ts), by which every delivery of an earlier event of its tenant
// is stored; then the key's stored deliveries, each with its event sequence: to the end of its
// subject when the router may have stored one of an earlier event after it (a late mark after it, or none
// known: src/router/late-marks.ts), otherwise up to it. What was read is kept per key (stream sequences
// only grow), so a key's backlog is read once, not per delivery.
//
// A delivery behind its key is parked here: held in memory (the in-flight sweep keeps it from being
// redelivered, so waiting does not use up its attempts), not in a lane. One check per key at a time, for
// its lowest parked delivery: at once when an attempt of the key ends in this process or the router's
// floor passes, otherwise with backoff (the earlier one is attempted elsewhere, or waits at the server for
// its retry, or for its dead letter).
import type { NextBySubject } from '../nats/next-by-subject.ts';
import { DeliveryHeader } from '../../streams/deliveries.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { InFlight } from './in-flight.ts';
import type { RecentAcks } from './recent-acks.ts';
import type { RouterFloor } from './router-floor.ts';

/** A parked key is looked at again after this long, doubling up to CHECK_MAX_MS while its head stays. */
export const CHECK_FIRST_MS = 250;
export const CHECK_MAX_MS = 5000;
/** A key with nothing parked or running here is forgotten after this long. */
const KEEP_IDLE_MS = 2000;

export interface KeyGate {
  /** A keyed delivery arrived: `go` runs once it is its key's head (maybe at once); parked until then. */
  admit(tracked: InFlight, go: () => void): void;
  /** An attempt of the delivery `tracked`, let through by admit, ended in this process. */
  ended(tracked: InFlight): void;
  /** Deliveries parked behind their key's head. */
  parked(): number;
  /** Their bytes (bodies and headers as received). */
  parkedBytes(): number;
  /** Stop: parked deliveries are let go (the server hands them out again after their ack wait). */
  close(): void;
}

interface Parked {
  tracked: InFlight;
  /** Its event's EVENTS sequence; 0 without the header (then storage order decides). */
  event: number;
  /**
   * Its barrier: once the router's floor is at it, every earlier event of its tenant is handled (the
   * router's `hookstream-ordered-after`, src/router/tenant-progress.ts); without one, `event - 1`.
   */
  after: number;
}

interface Key {
  /** Parked deliveries, earliest event first (then lowest stream sequence). */
  parked: Parked[];
  /** Sequences let through and not yet ended in this process. */
  active: Set<number>;
  /** The key's deliveries read from the stream, stream sequence → event sequence; left once seen gone. */
  stored: Map<number, number>;
  /** Where the next read of the key's newer deliveries starts. */
  readFrom: number;
  /** A router floor read before the last read to the end: every delivery of an event up to it is in `stored` (or gone). */
  complete: number;
  /** The lowest floor a callback of the router floor is registered for. */
  floorWait: number | undefined;
  /** Since when nothing of the key is parked or running here. */
  idleSince: number | undefined;
  checking: boolean;
  timer: NodeJS.Timeout | undefined;
  delay: number;
}

type Head = 'head' | 'behind' | 'gone';

/** Event order, then storage order. */
const before = (event: number, seq: number, otherEvent: number, otherSeq: number) => event < otherEvent || (event === otherEvent && seq < otherSeq);

const eventOf = (t: InFlight): number => {
  const v = Number(t.msg.headers?.get(DeliveryHeader.EventSeq));
  return Number.isSafeInteger(v) && v > 0 ? v : 0;
};
const afterOf = (t: InFlight, event: number): number => {
  const raw = t.msg.headers?.get(DeliveryHeader.OrderedAfter);
  const v = raw ? Number(raw) : NaN;
  return Number.isSafeInteger(v) && v >= 0 && v < event ? v : event - 1;
};

export function createKeyGate(deps: {
  /** Reads a key's stored deliveries from the stream. */
  heads: NextBySubject;
  stream: string;
  /** How far the router has handled EVENTS: shared by every gate of the process. */
  floor: RouterFloor;
  /** 2xx deliveries of this process whose ack may still be on its way: not stored any more, for order. */
  recentAcks: RecentAcks;
  /** What the sweep keeps alive; a parked delivery stays in it. */
  inFlight: Set<InFlight>;
  endpoint: string;
  log: Logger;
}): KeyGate {
  const { heads, stream, recentAcks, floor } = deps;
  const keys = new Map<string, Key>();
  const go = new Map<InFlight, () => void>();
  let parkedCount = 0;
  let parkedBytes = 0;
  const sizeOf = (t: InFlight) => t.msg.data.byteLength + (t.msg.headers ? 256 : 0);
  let closed = false;
  /** The highest stream sequence handed to this gate. */
  let highestAdmitted = 0;

  /**
   * Reads the key's deliveries stored since the last read, to the end, or with `upTo` to that sequence
   * when no delivery of an event up to `covers` can be stored after it; returns the sequences read.
   * After it, every delivery of the key of an event up to `covers` is in `stored` (or gone).
   */
  async function readNewer(subject: string, k: Key, covers: number, upTo?: number): Promise<Set<number>> {
    const read = new Set<number>();
    while (upTo === undefined || k.readFrom <= upTo) {
      const m = await heads.next(stream, subject, k.readFrom);
      if (m === null) break;
      k.stored.set(m.seq, m.eventSeq ?? 0);
      read.add(m.seq);
      k.readFrom = m.seq + 1;
    }
    k.complete = Math.max(k.complete, covers);
    return read;
  }

  /**
   * `head` when no delivery of the key with an earlier event (or the same event, stored earlier) is still
   * stored, but those this process got a 2xx for; `gone` when `p` itself is no longer stored (erased,
   * issue 22: it must not be sent). The router's floor is at `p.after` or more.
   *
   * Every delivery of the key of an event up to `p.after` is stored by then (the floor), and those of its
   * tenant's events after it were stored before `p` itself (the router stamped `p.after` once they were
   * handled): so reading the key up to `p` finds them all, unless one of an event up to `p.after` may be
   * stored after `p` (src/router/late-marks.ts), when the key is read to the end.
   */
  async function headOf(subject: string, k: Key, p: Parked): Promise<Head> {
    const seq = p.tracked.msg.seq;
    // Read only when what was read may lack a delivery of an earlier event; to the end only when one may
    // be stored after this one: the stream's last late mark is after it, or not known since the barrier.
    // Asked even when nothing is read: the first ask has the floor reader read this stream's marks from
    // its next reading on, before a later delivery needs them.
    const mark = floor.lateMark(stream);
    const unmarked = k.complete >= p.after || (mark !== undefined && mark.seq > 0 && mark.seq < seq && mark.floor >= p.after);
    const read = k.complete >= p.event - 1 ? new Set<number>()
      : unmarked ? await readNewer(subject, k, p.event - 1, seq)
      // To the end: the floor read before it (every delivery of an event up to it is stored by then).
        : await readNewer(subject, k, Math.max(floor.known(), p.event - 1));
    if (!read.has(seq) && !k.stored.has(seq)) {
      // Stored after the last read, of an event no earlier one waits for: only it is read.
      if (!await stillStored(seq)) return 'gone';
      k.stored.set(seq, p.event);
      read.add(seq);
    }
    const earlier = [...k.stored].filter(([s, e]) => s !== seq && before(e, s, p.event, seq)).map(([s]) => s).sort((a, b) => a - b);
    for (const s of earlier) {
      if (read.has(s) && !recentAcks.acked(stream, s)) return 'behind';
      if (!await stillStored(s)) { k.stored.delete(s); continue; }
      return 'behind';
    }
    if (read.has(seq)) return 'head';
    if (await stillStored(seq)) return 'head';
    k.stored.delete(seq);
    return 'gone';
  }

  /** Not gone, and not one this process got a 2xx for (its ack may be on its way). */
  const stillStored = async (seq: number) => !recentAcks.acked(stream, seq) && (await heads.at(stream, seq)) !== null;

  /**
   * A key with nothing parked or running here: forgets what it read once all of it is gone. A delivery
   * stored past any this gate was handed is not asked after at first: its own arrival here settles it
   * (acked, it is in recentAcks). Asking at every recheck was a read per recheck of every key whose next
   * deliveries wait in the stream (measured: 1.5 reads per delivery of a backlog). Once the rechecks are
   * at their slowest it is asked after too (it may be held elsewhere), so the key is forgotten in the end.
   */
  async function idle(subject: string, k: Key): Promise<void> {
    for (const s of k.stored.keys()) {
      if (s > highestAdmitted && k.delay < CHECK_MAX_MS) continue;
      if (!await stillStored(s)) k.stored.delete(s);
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
    // An attempt of the key runs here: its end checks again.
    if (k.active.size > 0) return;
    const lowest = k.parked[0];
    if (!lowest) {
      k.idleSince ??= performance.now();
      // What this process got a 2xx for is gone for order: forgotten without a read. Then, with nothing of
      // the key stored, no timer of its own: the sweep forgets it (a timer chain per idle key was three
      // checks per delivery, and most of the gate's allocation, when keys recur every few hundred ms).
      for (const s of k.stored.keys()) if (recentAcks.acked(stream, s)) k.stored.delete(s);
      if (k.stored.size === 0) return;
      // What it read stays while some of it is stored (held elsewhere): the stream's index may not show it again.
      k.checking = true;
      await idle(subject, k).catch(() => {}).finally(() => { k.checking = false; });
      if (closed || k.parked.length > 0 || k.active.size > 0) return void check(subject);
      if (k.stored.size > 0) later(subject, k);
      return;
    }
    // The barrier: not before the router has handled every earlier event of the tenant (their deliveries are stored then).
    const min = lowest.after;
    if (floor.known() < min) {
      if (k.floorWait === undefined || min < k.floorWait) {
        k.floorWait = min;
        floor.when(min, () => {
          if (k.floorWait === min) k.floorWait = undefined;
          void check(subject);
        });
      }
      return;
    }
    k.checking = true;
    let head: Head;
    try {
      head = await headOf(subject, k, lowest);
    } catch (e) {
      deps.log.warn('could not read the head of an ordering key; looking again shortly', { endpoint: deps.endpoint, reason: describe(e) });
      head = 'behind';
    } finally {
      k.checking = false;
    }
    if (closed) return;
    // An earlier delivery arrived meanwhile: that one is the candidate now.
    if (k.parked[0] !== lowest) return void check(subject);
    if (head === 'behind') return later(subject, k);
    k.parked.shift();
    parkedCount--;
    parkedBytes -= sizeOf(lowest.tracked);
    const { tracked } = lowest;
    if (head === 'gone') {
      // Erased while parked: dropped unsent (the server has nothing left to hand out again).
      deps.inFlight.delete(tracked);
      go.delete(tracked);
      tracked.msg.term();
      return void check(subject);
    }
    k.active.add(tracked.msg.seq);
    k.delay = CHECK_FIRST_MS;
    const release = go.get(tracked);
    go.delete(tracked);
    release?.();
  }

  /**
   * A key is kept a while with what it read, so its next delivery is often one read, not a read to the
   * end; forgotten once idle this long with nothing of it stored. One timer per gate while it knows keys.
   */
  let sweep: NodeJS.Timeout | undefined;
  function sweepLater(): void {
    if (sweep || closed) return;
    sweep = setTimeout(() => {
      sweep = undefined;
      const now = performance.now();
      for (const [subject, k] of keys) {
        if (k.idleSince === undefined || now - k.idleSince < KEEP_IDLE_MS || k.stored.size > 0 || k.checking || k.parked.length > 0 || k.active.size > 0) continue;
        clearTimeout(k.timer);
        keys.delete(subject);
      }
      if (keys.size > 0) sweepLater();
    }, KEEP_IDLE_MS);
    // Housekeeping: it never keeps a stopping process alive.
    sweep.unref();
  }

  return {
    admit(tracked, release) {
      const subject = tracked.msg.subject;
      let k = keys.get(subject);
      if (!k) {
        keys.set(subject, (k = {
          parked: [], active: new Set(), stored: new Map(), readFrom: 0, complete: 0, floorWait: undefined, idleSince: undefined,
          checking: false, timer: undefined, delay: CHECK_FIRST_MS,
        }));
        sweepLater();
      }
      k.idleSince = undefined;
      highestAdmitted = Math.max(highestAdmitted, tracked.msg.seq);
      // A redelivery of a parked delivery (its ack wait ran out anyway) replaces the old copy.
      const seq = tracked.msg.seq;
      const same = k.parked.findIndex((p) => p.tracked.msg.seq === seq);
      if (same >= 0) {
        deps.inFlight.delete(k.parked[same]!.tracked);
        go.delete(k.parked[same]!.tracked);
        parkedBytes += sizeOf(tracked) - sizeOf(k.parked[same]!.tracked);
        k.parked[same]!.tracked = tracked;
      } else {
        const event = eventOf(tracked);
        const p = { tracked, event, after: afterOf(tracked, event) };
        const at = k.parked.findIndex((q) => before(p.event, seq, q.event, q.tracked.msg.seq));
        k.parked.splice(at < 0 ? k.parked.length : at, 0, p);
        parkedCount++;
        parkedBytes += sizeOf(tracked);
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
    parkedBytes: () => parkedBytes,
    close() {
      closed = true;
      clearTimeout(sweep);
      for (const k of keys.values()) {
        clearTimeout(k.timer);
        for (const p of k.parked) deps.inFlight.delete(p.tracked);
      }
      keys.clear();
      go.clear();
      parkedCount = 0;
      parkedBytes = 0;
    },
  };
}
