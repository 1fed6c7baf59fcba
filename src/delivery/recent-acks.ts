// Deliveries this process acked after a 2xx, so that one whose ack the server lost (a NATS restart while
// acks were on their way) is acked again when it comes back, not POSTed twice (issue 17: most of the
// compound fault's remaining duplicates). Direct-mapped per DELIVERIES stream: a fixed table per stream this
// process acks on, whatever the rate; a sequence is remembered until one SLOTS higher is acked. Only
// redeliveries are looked up. A delivery is known by its stream, sequence, webhook id and endpoint: a
// replicated stream whose cluster state was reset can hand out a sequence again for another message, which a
// sequence alone would take for the acked one and ack unsent.
import type { PulledMsg } from '../nats/pulled-msg.ts';
import { DeliveryHeader } from '../../streams/deliveries.ts';

/** Sequences remembered per stream (a power of two). */
const SLOTS = 8192;

export interface RecentAcks {
  /** `m` was answered 2xx and is being acked. */
  add(m: PulledMsg): void;
  /** Whether this very delivery `m` was acked here after a 2xx (look up redeliveries only). */
  has(m: PulledMsg): boolean;
  /** By stream and sequence alone (the ordering gate, of a message it did not pull). */
  acked(stream: string, seq: number): boolean;
}

interface Table { seqs: Float64Array; ids: (string | undefined)[] }

/** What names a delivery beyond its place: its event (webhook id) and its endpoint. */
const identity = (m: PulledMsg) => `${m.headers?.get(DeliveryHeader.WebhookId) ?? ''} ${m.headers?.get(DeliveryHeader.Endpoint) ?? ''}`;

export function createRecentAcks(): RecentAcks {
  const streams = new Map<string, Table>();
  const acked = (stream: string, seq: number) => streams.get(stream)?.seqs[seq & (SLOTS - 1)] === seq;
  return {
    add(m) {
      let table = streams.get(m.info.stream);
      if (!table) streams.set(m.info.stream, (table = { seqs: new Float64Array(SLOTS), ids: new Array<string | undefined>(SLOTS) }));
      const slot = m.seq & (SLOTS - 1);
      table.seqs[slot] = m.seq;
      table.ids[slot] = identity(m);
    },
    has(m) {
      const table = streams.get(m.info.stream);
      const slot = m.seq & (SLOTS - 1);
      return table?.seqs[slot] === m.seq && table.ids[slot] === identity(m);
    },
    acked,
  };
}
