// REJECTED: the events the router could not route, with the reason, for operators to read
// (`hookstream events rejected`). One message per rejected event: the original body (at most
// HOOKSTREAM_MAX_EVENT_BYTES of it) and headers saying why, where it came from and when. Kept a week,
// like EVENTS; bounded in bytes, so a flood of bad events pushes out old records, never fills the disk.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, type EnsureOptions } from './ensure.ts';
import { isTenantId } from '../src/domain/ids.ts';

export const REJECTED_STREAM = 'REJECTED';
export const REJECTED_SUBJECTS = 'rejected.>';
/** Subject of a rejected event whose subject names no valid tenant: a token no tenant subject has. */
export const REJECTED_NO_TENANT = 'rejected.no_tenant';

/** `rejected.tenant.<tenant>`, so operators can filter by tenant; events without a valid tenant go to REJECTED_NO_TENANT. */
export const rejectedSubject = (tenant: string | undefined) =>
  (tenant !== undefined && isTenantId(tenant) ? `rejected.tenant.${tenant}` : REJECTED_NO_TENANT);
export const rejectedTenantSubject = (tenant: string) => `rejected.tenant.${tenant}`;

/** Headers of a REJECTED message (the body is the original event body, cut at the limit). */
export const RejectedHeader = {
  Reason: 'hookstream-reason',
  Detail: 'hookstream-detail',
  /** The event's subject, events.<tenant>.<event>. */
  Subject: 'hookstream-subject',
  Tenant: 'hookstream-tenant',
  /** Its sequence in EVENTS (kept 7 days there too). */
  EventsSeq: 'hookstream-events-seq',
  /** When EVENTS stored it, ISO 8601. */
  EventTime: 'hookstream-event-time',
  /** How many times the router had been given it. */
  Deliveries: 'hookstream-deliveries',
  /** The original body's size in bytes; the stored body is shorter when it was cut. */
  Size: 'hookstream-size',
  Truncated: 'hookstream-truncated',
  /** The producer's Nats-Msg-Id, if any. */
  ProducerMsgId: 'hookstream-producer-msg-id',
} as const;

export const REJECTED_MAX_AGE_MS = 7 * 24 * 3600_000;

export async function ensureRejectedStream(jsm: JetStreamManager, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: REJECTED_STREAM,
    subjects: [REJECTED_SUBJECTS],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: nanos(REJECTED_MAX_AGE_MS),
    max_bytes: 1024 * 1024 * 1024,
    // A body of at most 256 KiB (the EVENTS limit) and headers of a few KiB.
    max_msg_size: 256 * 1024 + 16 * 1024,
    duplicate_window: nanos(2 * 60_000),
  }, opts);
}
