// EVENTS: what producers publish, `events.<tenant>.<event name>`, kept for a week so a router that
// was down catches up. The router reads it through one durable consumer.
import { AckPolicy, DeliverPolicy, DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureConsumer, ensureStream, type EnsureOptions } from './ensure.ts';

export const EVENTS_STREAM = 'EVENTS';
export const EVENTS_SUBJECTS = 'events.>';
export const ROUTER_CONSUMER = 'router';
/** Largest message EVENTS stores (headers included): producers get an error for a larger event. */
export const EVENTS_MAX_MSG_SIZE = 256 * 1024;
/**
 * Deliveries of one event to the router, at most. The router gives every event a verdict well before
 * (src/router/verdict.ts); the bound is what stops an event that crashes it every time.
 */
export const ROUTER_MAX_DELIVER = 10;

/**
 * The last EVENTS sequence up to which the router has handled every event (acked or terminated), from its
 * consumer's info. Holding nothing, it has handled all it was given (its ack floor stays behind when the
 * end was deleted or skipped). Erasure (issue 22) and the ordering gate's barrier (issue 21) wait on it.
 */
export const routerFloor = (c: { num_ack_pending: number; ack_floor: { stream_seq: number }; delivered: { stream_seq: number } }): number =>
  c.num_ack_pending === 0 ? Math.max(c.ack_floor.stream_seq, c.delivered.stream_seq) : c.ack_floor.stream_seq;

export const eventSubject = (tenant: string, eventName: string) => `events.${tenant}.${eventName}`;

export async function ensureEventsStream(jsm: JetStreamManager, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: EVENTS_STREAM,
    subjects: [EVENTS_SUBJECTS],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_age: nanos(7 * 24 * 3600_000),
    max_msg_size: EVENTS_MAX_MSG_SIZE,
    // The minimum nats-server allows. Nats-Msg-Id dedupe here would span tenants (one tenant's id would
    // drop another's event); the router dedupes per tenant instead (src/router/dedupe.ts).
    duplicate_window: nanos(100),
  }, opts);
  await ensureConsumer(jsm, EVENTS_STREAM, {
    durable_name: ROUTER_CONSUMER,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    filter_subject: EVENTS_SUBJECTS,
    // The router acks only after the fan-out is stored; a crashed router's events come back after this.
    ack_wait: nanos(30_000),
    // No backoff: the router picks each retry's delay itself with nak(delay).
    max_deliver: ROUTER_MAX_DELIVER,
    max_ack_pending: 4096,
  }, undefined, opts);
}
