// DEAD_LETTER_ADVISORIES: captures nats-server's max-deliveries advisories for the delivery streams (and,
// with direct delivery, the partition streams the endpoints' own consumers read).
// An advisory is core NATS and lost if nobody listens, so a stream keeps it until the dead-letter
// role has turned it into a sealed record (none is lost while the service is down).
import { AckPolicy, DeliverPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureConsumer, ensureStream, type EnsureOptions } from './ensure.ts';
import { deliveryStream } from './deliveries.ts';
import { partitionStream } from './events.ts';

export const ADVISORIES_STREAM = 'DEAD_LETTER_ADVISORIES';
export const DEAD_LETTER_CONSUMER = 'deadletter';

export const maxDeliveriesSubject = (stream: string) => `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${stream}.*`;

export async function ensureDeadLetterStream(jsm: JetStreamManager, shards: number, opts?: EnsureOptions, directPartitions = 0): Promise<void> {
  await ensureStream(jsm, {
    name: ADVISORIES_STREAM,
    subjects: [
      ...Array.from({ length: shards }, (_, i) => maxDeliveriesSubject(deliveryStream(i))),
      ...Array.from({ length: directPartitions }, (_, p) => maxDeliveriesSubject(partitionStream(p))),
    ],
    retention: RetentionPolicy.Workqueue,
    storage: StorageType.File,
  }, opts);
  await ensureConsumer(jsm, ADVISORIES_STREAM, {
    durable_name: DEAD_LETTER_CONSUMER,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    ack_wait: nanos(30_000),
    max_ack_pending: 256,
  }, undefined, opts);
}

/** The advisory as nats-server 2.9 sends it (no consumer_seq). */
export interface MaxDeliveriesAdvisory {
  type: 'io.nats.jetstream.advisory.v1.max_deliver';
  id: string;
  timestamp: string;
  stream: string;
  consumer: string;
  stream_seq: number;
  deliveries: number;
}

export function parseAdvisory(x: unknown): MaxDeliveriesAdvisory | undefined {
  if (typeof x !== 'object' || x === null) return undefined;
  const a = x as Partial<MaxDeliveriesAdvisory>;
  if (typeof a.stream !== 'string' || typeof a.consumer !== 'string' || typeof a.stream_seq !== 'number') return undefined;
  return a as MaxDeliveriesAdvisory;
}
