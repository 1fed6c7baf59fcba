// Deliveries this process acked after a 2xx, by stream and sequence, so that one whose ack the server lost
// (a NATS restart while acks were on their way) is acked again when it comes back, not POSTed twice
// (issue 17: most of the compound fault's remaining duplicates). Direct-mapped per DELIVERIES stream: a
// fixed 64 KiB table per stream this process acks on, whatever the rate; a sequence is remembered until
// one SLOTS higher is acked. Only redeliveries are looked up, and DELIVERIES streams are never recreated
// while the service runs, so a sequence names one message.
import type { PulledMsg } from '../nats/pulled-msg.ts';

/** Sequences remembered per stream (a power of two). */
const SLOTS = 8192;

export interface RecentAcks {
  /** `m` was answered 2xx and is being acked. */
  add(m: PulledMsg): void;
  /** Whether `m` was acked here after a 2xx (look up redeliveries only). */
  has(m: PulledMsg): boolean;
  /** The same by stream and sequence (the ordering gate, of a message it did not pull). */
  acked(stream: string, seq: number): boolean;
}

export function createRecentAcks(): RecentAcks {
  const streams = new Map<string, Float64Array>();
  const acked = (stream: string, seq: number) => streams.get(stream)?.[seq & (SLOTS - 1)] === seq;
  return {
    add(m) {
      let table = streams.get(m.info.stream);
      if (!table) streams.set(m.info.stream, (table = new Float64Array(SLOTS)));
      table[m.seq & (SLOTS - 1)] = m.seq;
    },
    has: (m) => acked(m.info.stream, m.seq),
    acked,
  };
}
