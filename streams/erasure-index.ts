// ERASURE_INDEX (issue 22): where each routed event's copies are, by data subject, so erasing one user
// reads that user's entries and nothing else. `erasure.<tenant>.<hash>`, the hash a keyed HMAC of the
// subject id (src/erasure/subject-hash.ts): the stream names no id. One entry per subject id per event,
// written by the router before it acks the event.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, type EnsureOptions } from './ensure.ts';

export const ERASURE_INDEX_STREAM = 'ERASURE_INDEX';
export const erasureSubject = (tenant: string, hash: string) => `erasure.${tenant}.${hash}`;
export const erasureTenantSubjects = (tenant: string) => `erasure.${tenant}.>`;

/**
 * Longer than every store an entry points into: EVENTS (7 days), ATTEMPTS (the retry schedule + 7 days)
 * and a delivery queued for a live endpoint (its retry schedule). A disabled endpoint's queue can hold a
 * delivery longer: README, "Erasing a user's data".
 */
export const ERASURE_INDEX_MAX_AGE_MS = 30 * 24 * 3600_000;

/** Wire shape, version 1: one event and where its copies were stored. */
export interface ErasureIndexEntry {
  v: 1;
  /** The event's sequence in EVENTS. */
  events_seq: number;
  webhook_id: string;
  /** Each delivery of the fan-out: its work-queue stream, its sequence there, its endpoint. */
  deliveries: [string, number, string][];
}

export async function ensureErasureIndexStream(jsm: JetStreamManager, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: ERASURE_INDEX_STREAM,
    subjects: ['erasure.>'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: nanos(ERASURE_INDEX_MAX_AGE_MS),
    duplicate_window: nanos(60_000),
  }, opts);
}
