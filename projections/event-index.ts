// The event index (step 4 of the delivery path's next shape, docs/architecture.md): EVENTS folded into the
// erasure index's rows, one per event and subject id it carries, so erasure finds every event of a user
// whether or not a router stored a delivery of it. It runs where HOOKSTREAM_EVENT_PARTITIONS is set; the
// routers then index only the events they stored deliveries of (src/erasure/index-writer.ts), and both
// writers' rows of one event merge (src/erasure/index-store.ts).
//
// Every event is read, none is skipped: an event that does not parse, or names no subject, holds no row
// (the router rejects the first kind, and erasure reads the rejected events on their own).
import { EVENTS_STREAM } from '../streams/events.ts';
import type { IndexedEvent } from '../streams/erasure-index.ts';
import { parseEvent, type EventLimits } from '../src/domain/event-data.ts';
import { orderingKeyOf } from '../src/domain/ordering-key.ts';
import { orderingHeader } from '../src/nats/ordering-header.ts';
import type { WebhookIdCodec } from '../src/domain/webhook-id.ts';
import { subjectsOf, type SubjectHasher } from '../src/erasure/subject-hash.ts';
import { insertIndexRows } from '../src/erasure/index-store.ts';
import { Projection } from './checkpoint.ts';
import { startProjector, type Decoded, type Projector, type ProjectorDeps, type ReadModel, type StreamMessage } from './engine.ts';
import { appendFold } from './buffered.ts';

export interface EventIndexDeps {
  hasher: SubjectHasher;
  webhookIds: WebhookIdCodec;
  /** The router's limits: an event past them is rejected, never delivered, and holds no row. */
  limits: EventLimits;
  /** EVENTS' creation time, which webhook-ids name (streams/events.ts, eventsEpochMs). */
  epochMs: number;
}

/** The row an event makes (none when it does not parse or names no subject). */
export function indexedEvent(deps: EventIndexDeps, m: StreamMessage): IndexedEvent[] {
  const parsed = parseEvent(m.subject, m.data, deps.limits);
  if (!parsed.ok) return [];
  const keyed = orderingKeyOf(parsed.type, parsed.data, orderingHeader(m.headers));
  const subjects = subjectsOf(parsed.data, keyed.ok ? keyed.key : undefined);
  if (subjects.length === 0) return [];
  const webhookId = deps.webhookIds.encode({ seq: m.seq, ms: deps.epochMs });
  return [{ tenant: parsed.tenant, hashes: subjects.map((s) => deps.hasher.hash(s)), events_seq: m.seq, webhook_id: webhookId, deliveries: [] }];
}

export function eventIndexReadModel(deps: EventIndexDeps): ReadModel<IndexedEvent[]> {
  const fold = () => appendFold<IndexedEvent>(insertIndexRows);
  return {
    name: Projection.EventIndex,
    stream: EVENTS_STREAM,
    kind: 'event index',
    decode: (m): Decoded<IndexedEvent[]> => ({ ok: true, message: indexedEvent(deps, m) }),
    load: async () => fold(),
    empty: fold,
    // Rows merge and are never replaced: a rebuild writes them again over what is there (the routers' rows
    // share the table).
    clear: async () => {},
  };
}

export const startEventIndexProjector = (deps: ProjectorDeps & EventIndexDeps): Promise<Projector> => startProjector(eventIndexReadModel(deps), deps);
