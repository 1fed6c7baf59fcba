// ATTEMPT_LOG: every delivery attempt, successes too, for the operators' delivery log. The delivery role
// gathers the attempts of a few tens of milliseconds into one message on `attempt_log.batch`
// (src/deliverylog/recorder.ts); the attempt-log projection (projections/attempt-log.ts) folds them into
// Postgres (attempt_log, delivery_log) and purges what it applied, so the stream is only the buffer between
// the two. The records name ids, statuses and the first 1 KB of the receiver's answer; never a payload or
// a request header.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, type EnsureOptions } from './ensure.ts';

export const ATTEMPT_LOG_STREAM = 'ATTEMPT_LOG';
export const ATTEMPT_LOG_SUBJECT = 'attempt_log.batch';
/** A buffer: batches not applied within a day (Postgres away that long) are lost to the log, nothing else. */
const MAX_AGE_MS = 24 * 3600_000;

export const AttemptOutcome = { Ok: 'ok', Failed: 'failed', Dead: 'dead', Dropped: 'dropped' } as const;
export type AttemptOutcome = (typeof AttemptOutcome)[keyof typeof AttemptOutcome];
export const ATTEMPT_OUTCOMES: readonly string[] = Object.values(AttemptOutcome);

/** One attempt (wire shape, version 1). */
export interface AttemptLogEntry {
  tenant: string;
  endpoint: string;
  webhook_id: string;
  event: string;
  /** 1 for the first attempt; 0 for a delivery the endpoint's full queue refused. */
  attempt: number;
  /** When it started, ms since the epoch. */
  at: number;
  duration_ms: number;
  status: number | null;
  /** `failed`: another attempt follows; `dead`: it was the last one allowed. */
  outcome: AttemptOutcome;
  /** The failure's class (status, timeout, connection, forbidden_target, invalid_url). */
  error_class?: string;
  error?: string;
  /** The receiver's answer, first 1 KB, printable characters only. */
  body?: string;
  /** When the next attempt is due, ms since the epoch. */
  next_at?: number;
}

export interface AttemptLogBatch {
  v: 1;
  entries: AttemptLogEntry[];
}

export async function ensureAttemptLogStream(jsm: JetStreamManager, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: ATTEMPT_LOG_STREAM,
    subjects: ['attempt_log.>'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: nanos(MAX_AGE_MS),
  }, opts);
}
