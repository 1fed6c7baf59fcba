// When EVENTS stored an event, by its sequence: what a partition stream's copy is decided by (its own
// timestamp is the copy's, later by a fraction of a millisecond to seconds). Read once per event in this
// process: an event's endpoints read it within moments of each other.
import type { JetStreamManager } from '@nats-io/jetstream';
import { EVENTS_STREAM } from '../../streams/events.ts';

export type EventTimes = (seq: number) => number | Promise<number>;

/** Event times kept in this process. */
const KEPT = 4096;

/**
 * The time (ms) EVENTS stored the event at `seq`. Gone (older than EVENTS keeps) or unreadable: -Infinity,
 * taken as stored before any cut (sent: a duplicate at worst, never a loss), and read again next time.
 */
export function createEventTimes(deps: { jsm: JetStreamManager }): EventTimes {
  const times = new Map<number, number | Promise<number>>();
  return (seq) => {
    let t = times.get(seq);
    if (t === undefined) {
      t = deps.jsm.streams.getMessage(EVENTS_STREAM, { seq }).then((m) => {
        const ms = m?.time.getTime();
        if (ms === undefined) times.delete(seq);
        else times.set(seq, ms);
        return ms ?? -Infinity;
      }, () => {
        times.delete(seq);
        return -Infinity;
      });
      times.set(seq, t);
      if (times.size > KEPT) times.delete(times.keys().next().value!);
    }
    return t;
  };
}
