// Deliveries this process acked after a 2xx, so that one whose ack the server lost (a NATS restart while
// acks were on their way) is acked again when it comes back, not POSTed twice (issue 17: most of the
// compound fault's remaining duplicates). Direct-mapped per DELIVERIES stream: a fixed table per stream this
// process acks on, whatever the rate; a sequence is remembered until one SLOTS higher is acked. A delivery
// is known by its stream, sequence, webhook id and endpoint: a replicated stream whose cluster state was
// reset can hand out a sequence again for another message, which a sequence alone would take for the acked
// one and ack unsent. A partition stream's message (direct delivery) is read by each endpoint of its
// tenants: its slot mixes in the consumer, so one endpoint's ack does not push out another's.
import type { PulledMsg } from '../nats/pulled-msg.ts';
import { isPartitionStream } from '../../streams/events.ts';
import { DeliveryHeader } from '../../streams/deliveries.ts';

/** Sequences remembered per stream (a power of two). */
const SLOTS = 8192;

export interface RecentAcks {
  /** `m` was answered 2xx and is being acked. */
  add(m: PulledMsg): void;
  /** Whether this very delivery `m` was acked here after a 2xx. */
  has(m: PulledMsg): boolean;
  /** By stream and sequence alone (the ordering gate, of a message it did not pull). */
  acked(stream: string, seq: number): boolean;
}

interface Table { seqs: Float64Array; ids: Float64Array }

/** FNV-1a over a string's UTF-16 units, continuing from `h`. */
function fnv(s: string, h: number): number {
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/**
 * What names a delivery beyond its place, its event (webhook id) and its consumer (its endpoint's: a
 * partition stream's message is read by every endpoint of its tenants, none with a header), as a 53-bit hash (two
 * FNV-1a runs): a number in a typed array, not a string kept for every delivery of the last thousands (each
 * one outlived young-generation GC). Only a reused sequence compares it, where two deliveries would have to
 * meet one chance in 2^53 to be taken for each other.
 */
function identity(m: PulledMsg): number {
  const webhookId = m.headers?.get(DeliveryHeader.WebhookId) ?? '';
  const endpoint = m.info.consumer;
  const a = fnv(endpoint, fnv(' ', fnv(webhookId, 0x811c9dc5)));
  const b = fnv(endpoint, fnv(' ', fnv(webhookId, 0x050c5d1f)));
  return a * 0x200000 + (b & 0x1fffff);
}

/** The slot of `m` in its stream's table: by sequence; in a partition stream, by sequence and consumer. */
const slotOf = (m: PulledMsg): number =>
  (isPartitionStream(m.info.stream) ? m.seq ^ fnv(m.info.consumer, 0x811c9dc5) : m.seq) & (SLOTS - 1);

export function createRecentAcks(): RecentAcks {
  const streams = new Map<string, Table>();
  const acked = (stream: string, seq: number) => streams.get(stream)?.seqs[seq & (SLOTS - 1)] === seq;
  return {
    add(m) {
      let table = streams.get(m.info.stream);
      if (!table) streams.set(m.info.stream, (table = { seqs: new Float64Array(SLOTS), ids: new Float64Array(SLOTS) }));
      const slot = slotOf(m);
      table.seqs[slot] = m.seq;
      table.ids[slot] = identity(m);
    },
    has(m) {
      const table = streams.get(m.info.stream);
      if (!table) return false;
      const slot = slotOf(m);
      return table.seqs[slot] === m.seq && table.ids[slot] === identity(m);
    },
    acked,
  };
}
