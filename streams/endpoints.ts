// ENDPOINTS: the endpoint event log, one subject per endpoint (`endpoints.<id>`), kept forever.
// It is the source of truth; Postgres and every in-memory view are projections of it.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { ensureStream, type EnsureOptions } from './ensure.ts';
import type { EndpointId } from '../src/domain/ids.ts';

export const ENDPOINTS_STREAM = 'ENDPOINTS';
const PREFIX = 'endpoints.';
export const endpointSubject = (id: string) => `${PREFIX}${id}`;
/** The id a subject of this stream names (unchecked: the decoder compares it with the event's id). */
export const endpointOfSubject = (subject: string) => subject.slice(PREFIX.length) as EndpointId;

export async function ensureEndpointsStream(jsm: JetStreamManager, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: ENDPOINTS_STREAM,
    subjects: ['endpoints.>'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    // Never drop history: a full stream refuses new commands rather than losing old events.
    discard: DiscardPolicy.New,
    max_msg_size: 64 * 1024,
  }, opts);
}
