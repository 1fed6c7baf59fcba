// OPS: operational events for operators and the platform (e-mails, dashboards), `ops.<tenantId>.<type>`,
// JSON, kept 7 days so a reader that was down catches up. The shapes below are a public contract
// (README, "Operational events"): add fields, never change one; a breaking change gets v: 2.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, type EnsureOptions } from './ensure.ts';

export const OPS_STREAM = 'OPS';
export const OPS_SUBJECTS = 'ops.>';
export const OPS_MAX_AGE_MS = 7 * 24 * 3600_000;

export const OpsEventType = {
  EndpointDisabled: 'endpoint.disabled',
  EndpointEnabled: 'endpoint.enabled',
  AttemptExhausted: 'message.attempt.exhausted',
  AttemptRecovered: 'message.attempt.recovered',
  EndpointQueueFull: 'endpoint.queue_full',
} as const;
export type OpsEventType = (typeof OpsEventType)[keyof typeof OpsEventType];

export const opsSubject = (tenant: string, type: OpsEventType) => `ops.${tenant}.${type}`;

/** Wire shapes, version 1; every one has v, type, tenant, endpoint and at (ISO 8601). */
export type OpsEvent =
  | { v: 1; type: 'endpoint.disabled'; tenant: string; endpoint: string; reason: 'gone' | 'failing' | 'operator'; at: string;
    /** Since when every attempt failed (reason failing), else null. */
    failing_since: string | null }
  | { v: 1; type: 'endpoint.enabled'; tenant: string; endpoint: string; at: string;
    /** Why it had been disabled. */
    previous_reason: 'gone' | 'failing' | 'operator' | null }
  | { v: 1; type: 'message.attempt.exhausted'; tenant: string; endpoint: string; at: string; webhook_id: string; event_type: string;
    attempts: number; last_status: number | null; last_error: string | null; dead_letter_id: string }
  | { v: 1; type: 'message.attempt.recovered'; tenant: string; endpoint: string; at: string;
    /** When the run of failures began. */
    failing_since: string; webhook_id: string | null; event_type: string | null }
  | { v: 1; type: 'endpoint.queue_full'; tenant: string; endpoint: string; at: string;
    /** The queue's bound (HOOKSTREAM_MAX_QUEUED); at most one such event per endpoint per minute. */
    max_queued: number;
    /** The first delivery dropped in that minute. */
    webhook_id: string; event_type: string };

export async function ensureOpsStream(jsm: JetStreamManager, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: OPS_STREAM,
    subjects: [OPS_SUBJECTS],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: nanos(OPS_MAX_AGE_MS),
    // Small events; a bound in bytes so a storm of them never fills the disk.
    max_bytes: 256 * 1024 * 1024,
    max_msg_size: 16 * 1024,
    // Every publisher sets Nats-Msg-Id, so an event two instances (or a retry) publish is kept once.
    duplicate_window: nanos(2 * 60_000),
  }, opts);
}
