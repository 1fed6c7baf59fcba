// Marks of deliveries that may be stored after a later event's (issue 21), so that the ordering gate
// reads a key to the end of its subject only behind a mark, not for every delivery.
//
// A router stores its fan-outs in event order, one publish after another; per delivery stream it follows
// the sequences JetStream stored its own publishes at. While they follow one another (nothing else stored
// in between) and their events do not go back, a run of its deliveries is in event order. Everything
// else starts a new run and is marked: the first store of this process, a gap (another router, a replay,
// anything stored in between), an event lower than the run's (a retry), a catch-up of endpoints the first
// routing missed. A mark is a marker message stored in the same stream after the delivery
// (`lateMarkSubject`), before the event is acked.
//
// The gate's proof: if an earlier event's delivery p of a key is stored after a later one's q, then p is
// marked, or it is in a run whose marked start is after q (a run cannot hold q: it is in event order), so
// a marker is stored after q, before the router's floor passes p's event. So when the floor has passed
// S-1 and the stream's last marker is before q, no delivery of an event before S is stored after q.
import type { JetStreamManager } from '@nats-io/jetstream';
import { lateMarkSubject, QUEUE_FULL_CODE } from '../../streams/deliveries.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import { PublishRejectedError, type AckedPublisher, type StoredAt } from '../nats/acked-publisher.ts';

/** Markers written to a stream between two purges of the older ones (keeping the last). */
const PURGE_EVERY = 1000;
/** Between tries of a marker NATS did not store: the event's ack waits, and with it the router's slot. */
const RETRY_MS = 250;

export interface LateMarks {
  /**
   * The router stored a delivery of event `eventSeq` at `at` (in the order the stores are answered);
   * `late` when it is late by nature (a catch-up). Resolves once its marker, if it needs one, is stored.
   */
  stored(at: StoredAt, eventSeq: number, late: boolean): Promise<void> | undefined;
  /** A marker in `stream` whatever was stored (a retried event: what its earlier routing stored). */
  mark(stream: string): Promise<void>;
  close(): void;
}

interface StreamRun {
  /** The last sequence a publish of this process was stored at (0: none yet). */
  last: number;
  /** The highest event of the current run. */
  event: number;
  /** A marker asked for and not sent yet: later marks join it. */
  next: Promise<void> | undefined;
  /** Markers this process stored in the stream: the older ones are purged every so many. */
  written: number;
}

export function createLateMarks(deps: { publisher: AckedPublisher; jsm: JetStreamManager; maxQueued: number; log: Logger }): LateMarks {
  const { publisher, log } = deps;
  const runs = new Map<string, StreamRun>();
  let closed = false;
  const runOf = (stream: string): StreamRun => {
    let r = runs.get(stream);
    if (!r) runs.set(stream, (r = { last: 0, event: 0, next: undefined, written: 0 }));
    return r;
  };

  /** The older markers go; the last stays (a stream without one is read to the end by the gates). */
  const purge = (stream: string) => deps.jsm.streams.purge(stream, { filter: lateMarkSubject(stream), keep: deps.maxQueued > 1 ? 1 : 0 });

  async function write(stream: string, r: StreamRun): Promise<void> {
    for (;;) {
      try {
        if (r.written > 0 && r.written % Math.min(PURGE_EVERY, Math.max(1, deps.maxQueued - 1)) === 0) await purge(stream);
        // Its own store is one of this process's: a later delivery right after it is still in the run.
        observe(await publisher.publish(lateMarkSubject(stream), ''));
        r.written++;
        return;
      } catch (e) {
        if (closed) throw e;
        // The marker subject is full (markers of several routers): purge, then again.
        if (e instanceof PublishRejectedError && e.code === QUEUE_FULL_CODE) await purge(stream).catch(() => {});
        else log.warn('could not store an ordering mark; trying again', { stream, reason: describe(e) });
        await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
        if (closed) throw e;
      }
    }
  }

  function mark(stream: string): Promise<void> {
    const r = runOf(stream);
    // One marker for every mark asked for before it is sent: sent after all their deliveries were stored.
    r.next ??= new Promise<void>((resolve) => setImmediate(resolve)).then(() => {
      r.next = undefined;
      return write(stream, r);
    });
    return r.next;
  }

  /** Keeps the run going over a store of this process; false when it starts a new one. */
  function observe(at: StoredAt, eventSeq?: number): boolean {
    const r = runOf(at.stream);
    const inRun = r.last > 0 && at.seq === r.last + 1 && (eventSeq === undefined || eventSeq >= r.event);
    r.last = Math.max(r.last, at.seq);
    // In the run its event is the highest; out of it, a new run starts at it (a marker keeps the run:
    // stored after everything before it, it is itself the mark of what a gap before it let in).
    if (eventSeq !== undefined) r.event = eventSeq;
    return inRun;
  }

  return {
    stored(at, eventSeq, late) {
      if (observe(at, eventSeq) && !late) return undefined;
      return mark(at.stream);
    },
    mark,
    close() {
      closed = true;
    },
  };
}
