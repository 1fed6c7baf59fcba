// PRODUCER_IDS (direct delivery only): which event holds a producer's Nats-Msg-Id, so a retried publish
// stored twice in EVENTS is sent once (src/delivery/producer-claims.ts). `producer_ids.<scoped id>` (the id
// scoped to its tenant and hashed, src/domain/producer-id.ts), one message per subject, its
// `hookstream-event-seq` header the holder's EVENTS sequence, written only with the subject's expected last
// sequence, so of two processes only one claims or takes over a mark. Kept as long as the router's
// deduplication window: a retried publish within 2 minutes of the first is one event.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, type EnsureOptions } from './ensure.ts';

export const PRODUCER_IDS_STREAM = 'PRODUCER_IDS';
export const producerIdSubject = (scopedId: string) => `producer_ids.${scopedId}`;
/** How long a mark stands: the DELIVERIES streams' deduplication window, which the router relies on. */
export const PRODUCER_ID_WINDOW_MS = 2 * 60_000;

export async function ensureProducerIdsStream(jsm: JetStreamManager, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: PRODUCER_IDS_STREAM,
    subjects: ['producer_ids.*'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_msgs_per_subject: 1,
    max_age: nanos(PRODUCER_ID_WINDOW_MS),
    max_msg_size: 256,
    duplicate_window: nanos(100),
  }, opts);
}
