// ATTEMPTS: one small record per failed delivery attempt, `attempts.<endpointId>.<webhookId>`. Successes
// write nothing (the hot path stays one POST and one ack); a delivery that is gone from its work queue and
// is not dead was acknowledged. The dead-letter record takes its last failure reason from here, and
// operators read the history of a webhook-id.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, type EnsureOptions } from './ensure.ts';

export const ATTEMPTS_STREAM = 'ATTEMPTS';
export const attemptSubject = (endpointId: string, webhookId: string) => `attempts.${endpointId}.${webhookId}`;

/** Wire shape, version 1. */
export interface AttemptRecord {
  v: 1;
  endpoint: string;
  webhook_id: string;
  event: string;
  attempt: number;
  at: string;
  duration_ms: number;
  status: number | null;
  error: string | null;
  /** When the next attempt is due, or null when this was the last one allowed. */
  next_attempt_at: string | null;
  // Added by issue 10 (absent in older records): the receiver's Retry-After in ms (capped at 1 hour), and
  // what set next_attempt_at when it was not the retry schedule.
  retry_after_ms?: number;
  next_attempt_by?: 'retry_after' | 'rate_limit';
  // Added by issue 17: not an attempt but the router's record that the endpoint's queue refused the
  // delivery (HOOKSTREAM_MAX_QUEUED); attempt is 0 and it is never retried.
  dropped?: 'queue_full';
  // Added with the direct backstop: the copy in a partition stream this attempt sent (direct delivery), so
  // that a final attempt whose max-deliveries advisory was lost is dead-lettered from it
  // (src/deadletter/direct-backstop.ts). Absent for a queued delivery.
  copy?: { stream: string; seq: number };
}

export async function ensureAttemptsStream(jsm: JetStreamManager, retrySchedule: number[], opts?: EnsureOptions): Promise<void> {
  const lifetime = retrySchedule.reduce((a, b) => a + b, 0);
  await ensureStream(jsm, {
    name: ATTEMPTS_STREAM,
    subjects: ['attempts.>'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    // Long enough to explain a dead letter a week after it died.
    max_age: nanos(lifetime + 7 * 24 * 3600_000),
    max_msgs_per_subject: 100,
  }, opts);
}
