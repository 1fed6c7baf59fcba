// The router's half of erasure (issue 22): for each event it routes, one ERASURE_INDEX entry per subject
// id the event carries, naming the event's place in EVENTS and each delivery's place in its work queue.
// Written before the event is acked, so an event acked by the router is always findable by subject.
import { erasureSubject, type ErasureIndexEntry } from '../../streams/erasure-index.ts';
import type { EventData } from '../domain/event-data.ts';
import type { AckedPublisher } from '../nats/acked-publisher.ts';
import { subjectsOf, type SubjectHasher } from './subject-hash.ts';

export interface RoutedCopies {
  tenant: string;
  data: EventData;
  eventsSeq: number;
  webhookId: string;
  /** The event's ordering key (issue 21), if it has one. */
  orderingKey: string | undefined;
  /** [stream, seq, endpoint] of each delivery stored. */
  deliveries: [string, number, string][];
}

export interface ErasureIndexWriter {
  /** Resolves once every entry is stored (at once when the event names no subject); rejects on NATS trouble. */
  record(copies: RoutedCopies): Promise<void>;
}

export function createErasureIndexWriter(deps: { publisher: AckedPublisher; hasher: SubjectHasher }): ErasureIndexWriter {
  return {
    async record(c) {
      const subjects = subjectsOf(c.data, c.orderingKey);
      if (subjects.length === 0) return;
      const entry: ErasureIndexEntry = { v: 1, events_seq: c.eventsSeq, webhook_id: c.webhookId, deliveries: c.deliveries };
      const body = JSON.stringify(entry);
      await Promise.all(subjects.map((s) => deps.publisher.publish(erasureSubject(c.tenant, deps.hasher.hash(s)), body)));
    },
  };
}
