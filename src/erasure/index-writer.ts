// The router's half of erasure (issue 22): for each event it routes, an ERASURE_INDEX entry naming the
// hashes of the subject ids it carries, the event's place in EVENTS and each delivery's place in its work
// queue. Entries are written together, one message every BATCH_MS (or sooner when a batch is large),
// and an event's record() resolves only once its batch is stored: the router acks an event after that,
// so an event acked by the router is always findable by subject. One publish per batch rather than one per
// subject id per event: the index cost ~120 µs of service CPU per event when it was written entry by entry.
// Where the event index indexes every event from EVENTS (HOOKSTREAM_EVENT_PARTITIONS set,
// projections/event-index.ts), the router writes only the events it stored deliveries of.
import { ERASURE_BATCH_SUBJECT, type ErasureIndexBatch, type IndexedEvent } from '../../streams/erasure-index.ts';
import type { EventData } from '../domain/event-data.ts';
import type { AckedPublisher } from '../nats/acked-publisher.ts';
import { subjectsOf, type SubjectHasher } from './subject-hash.ts';

/** How long entries wait for others before their batch is written: added to the router's ack, not to a delivery. */
const BATCH_MS = 5;
/** A batch is written at once past this size, far below NATS's 1 MiB message limit. */
const MAX_BATCH_BYTES = 256 * 1024;

export interface RoutedCopies {
  tenant: string;
  data: EventData;
  eventsSeq: number;
  /** Or how to make it, when the entry is written (the router makes it only for events it writes down). */
  webhookId: string | (() => string);
  /** The event's ordering key (issue 21), if it has one. */
  orderingKey: string | undefined;
  /** [stream, seq, endpoint] of each delivery stored. */
  deliveries: [string, number, string][];
}

export interface ErasureIndexWriter {
  /** Resolves once the event's entry is stored (at once when it names no subject); rejects on NATS trouble. */
  record(copies: RoutedCopies): Promise<void>;
}

interface Batch {
  entries: IndexedEvent[];
  bytes: number;
  stored: Promise<void>;
  settle: (e?: unknown) => void;
}

export function createErasureIndexWriter(deps: {
  publisher: AckedPublisher; hasher: SubjectHasher; batchMs?: number;
  /** The event index has every event: write only the ones with deliveries. */
  deliveriesOnly?: boolean;
}): ErasureIndexWriter {
  let open: Batch | undefined;
  let timer: NodeJS.Timeout | undefined;

  const write = (): void => {
    clearTimeout(timer);
    timer = undefined;
    const batch = open;
    open = undefined;
    if (!batch) return;
    const body: ErasureIndexBatch = { v: 2, entries: batch.entries };
    deps.publisher.publish(ERASURE_BATCH_SUBJECT, JSON.stringify(body)).then(() => batch.settle(), (e: unknown) => batch.settle(e ?? new Error('index batch not stored')));
  };

  return {
    record(c) {
      if (deps.deliveriesOnly && c.deliveries.length === 0) return Promise.resolve();
      const subjects = subjectsOf(c.data, c.orderingKey);
      if (subjects.length === 0) return Promise.resolve();
      const entry: IndexedEvent = {
        tenant: c.tenant, hashes: subjects.map((s) => deps.hasher.hash(s)), events_seq: c.eventsSeq, webhook_id: typeof c.webhookId === 'string' ? c.webhookId : c.webhookId(), deliveries: c.deliveries,
      };
      if (!open) {
        let settle!: (e?: unknown) => void;
        const stored = new Promise<void>((resolve, reject) => { settle = (e) => (e === undefined ? resolve() : reject(e)); });
        // Each event's settle catches its own rejection; this keeps an unobserved one from crashing the process.
        stored.catch(() => {});
        open = { entries: [], bytes: 0, stored, settle };
        timer = setTimeout(write, deps.batchMs ?? BATCH_MS);
      }
      const batch = open;
      batch.entries.push(entry);
      batch.bytes += 64 + entry.hashes.length * 35 + entry.webhook_id.length + c.deliveries.length * 64;
      if (batch.bytes >= MAX_BATCH_BYTES) write();
      return batch.stored;
    },
  };
}
