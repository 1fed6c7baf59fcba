// DELIVERIES_<n>: one message per (event, subscribed endpoint), `deliveries.<n>.<endpointId>`, on a
// work-queue stream so an acked delivery is gone. Endpoints are spread over several streams because
// nats-server 2.9 slows with the number of consumers on one stream (../shared/notes/jetstream-2.9.md).
// Each endpoint has its own durable consumer: its retries and backlog never hold back another endpoint.
import { AckPolicy, DeliverPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, type DurableDefinition } from './ensure.ts';

export const DELIVERIES_PREFIX = 'DELIVERIES_';

/** Headers of a delivery message (the body is the exact JSON body to POST). */
export const DeliveryHeader = {
  WebhookId: 'webhook-id',
  Event: 'hookstream-event',
  Tenant: 'hookstream-tenant',
  Endpoint: 'hookstream-endpoint',
  /** Set on a replayed dead letter: how many times it was replayed. */
  Replay: 'hookstream-replay',
} as const;

/** FNV-1a: a stable, fast spread of endpoint ids over shards. */
export function shardOf(endpointId: string, shards: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < endpointId.length; i++) {
    h ^= endpointId.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return (h >>> 0) % shards;
}

export const deliveryStream = (shard: number) => `${DELIVERIES_PREFIX}${shard}`;

export interface DeliveryAddress {
  stream: string;
  subject: string;
}

export function deliveryAddress(endpointId: string, shards: number): DeliveryAddress {
  const shard = shardOf(endpointId, shards);
  return { stream: deliveryStream(shard), subject: `deliveries.${shard}.${endpointId}` };
}

export async function ensureDeliveryStreams(jsm: JetStreamManager, shards: number): Promise<void> {
  // The shard count decides where every endpoint's messages live: changing it would strand them.
  const existing: string[] = [];
  for await (const name of jsm.streams.names(`deliveries.>`)) if (name.startsWith(DELIVERIES_PREFIX)) existing.push(name);
  if (existing.length > 0 && existing.length !== shards) {
    throw new Error(
      `HOOKSTREAM_DELIVERY_SHARDS is ${shards} but NATS holds ${existing.length} delivery streams; keep the value they were created with`,
    );
  }
  for (let shard = 0; shard < shards; shard++) {
    await ensureStream(jsm, {
      name: deliveryStream(shard),
      subjects: [`deliveries.${shard}.>`],
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      max_msg_size: 512 * 1024,
      duplicate_window: nanos(2 * 60_000),
    });
  }
}

/**
 * The consumer of one endpoint. JetStream's redelivery backoff is the retry schedule: a failed attempt is
 * not acked and comes back after the next delay; after max_deliver the server raises the max-deliveries
 * advisory that the dead-letter role captures.
 */
export function endpointConsumer(endpointId: string, opts: { shards: number; retrySchedule: number[]; maxInFlight: number }): DurableDefinition & { filter_subject: string } {
  return {
    durable_name: endpointId,
    filter_subject: deliveryAddress(endpointId, opts.shards).subject,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    // With backoff set, nats-server uses backoff[0] as ack_wait; the delivery role calls working()
    // on attempts that run longer, so an attempt in flight is never delivered twice.
    ack_wait: nanos(opts.retrySchedule[0]!),
    backoff: opts.retrySchedule.map(nanos),
    max_deliver: opts.retrySchedule.length + 1,
    max_ack_pending: opts.maxInFlight,
  };
}
