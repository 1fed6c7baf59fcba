// ENDPOINTS: the endpoint event log, one subject per endpoint (`endpoints.<id>`), kept forever.
// It is the source of truth; Postgres and every in-memory view are projections of it.
//
// ENDPOINT_STATES: each endpoint's folded state at an ENDPOINTS sequence (`endpoint_states.<id>`, only
// the latest kept), written after each command, so a command reads its endpoint with two message gets
// whatever the length of its history (src/endpoints/read.ts). A state is a cache: one that is missing,
// behind or from another stream costs a fold of the events it lacks, never a wrong answer.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { ensureStream, type EnsureOptions } from './ensure.ts';
import type { EndpointId } from '../src/domain/ids.ts';

export const ENDPOINTS_STREAM = 'ENDPOINTS';
const PREFIX = 'endpoints.';
export const endpointSubject = (id: string) => `${PREFIX}${id}`;
/** The id a subject of this stream names (unchecked: the decoder compares it with the event's id). */
export const ENDPOINT_STATES_STREAM = 'ENDPOINT_STATES';
export const endpointStateSubject = (id: string) => `endpoint_states.${id}`;
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
  await ensureStream(jsm, {
    name: ENDPOINT_STATES_STREAM,
    subjects: ['endpoint_states.>'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    // Each write deletes the states before it with secure erase (src/endpoints/read.ts); this only bounds
    // what writes that failed half-way leave.
    max_msgs_per_subject: 4,
    max_msg_size: 64 * 1024,
  }, opts);
}
