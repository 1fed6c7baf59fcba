// ERASURE_INDEX (issue 22): where each routed event's copies are, by data subject. The router writes the
// entries of the events it routes together, one message on `erasure.batch` every few milliseconds, before
// it acks them; the erasure-index projection (projections/erasure-index.ts) folds them into Postgres rows
// keyed by tenant and subject hash, so erasing one user reads that user's rows and nothing else, however
// large the index. The hash is a keyed HMAC of the subject id (src/erasure/subject-hash.ts): the stream
// and the rows name no id. The stream is the durable buffer between router and projection, and is read
// past the projection's checkpoint by erasure. (Version 1 wrote one message per subject id per event on
// `erasure.<tenant>.<hash>`; still projected.)
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, type EnsureOptions } from './ensure.ts';

export const ERASURE_INDEX_STREAM = 'ERASURE_INDEX';
/** Where the router writes its batches of entries (two tokens: never a version 1 subject). */
export const ERASURE_BATCH_SUBJECT = 'erasure.batch';
/** Version 1: one entry per subject id per event. */
export const erasureSubject = (tenant: string, hash: string) => `erasure.${tenant}.${hash}`;

/**
 * Longer than every store an entry points into: EVENTS (7 days), ATTEMPTS (the retry schedule + 7 days)
 * and a delivery queued for a live endpoint (its retry schedule). A disabled endpoint's queue can hold a
 * delivery longer: README, "Erasing a user's data".
 */
export const ERASURE_INDEX_MAX_AGE_MS = 30 * 24 * 3600_000;

/** Wire shape, version 2: the entries of the events a router acked together, one per event. */
export interface ErasureIndexBatch {
  v: 2;
  entries: IndexedEvent[];
}

/** One routed event: its tenant, the hashes of the subject ids it carries, and where its copies are. */
export interface IndexedEvent {
  tenant: string;
  hashes: string[];
  events_seq: number;
  webhook_id: string;
  /** Each delivery of the fan-out: its work-queue stream, its sequence there, its endpoint. */
  deliveries: [string, number, string][];
}

/** Wire shape, version 1 (on `erasure.<tenant>.<hash>`): one event and where its copies were stored. */
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
