// DELIVERIES_<n>: one message per (event, subscribed endpoint), `deliveries.<n>.<endpointId>`, on a
// work-queue stream so an acked delivery is gone. Endpoints are spread over several streams because
// nats-server 2.9 gets slower with every consumer added to one stream (measured).
// Each endpoint has its own durable consumer: its retries and backlog never hold back another endpoint.
import { AckPolicy, DeliverPolicy, DiscardPolicy, JetStreamApiCodes, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureCappedStream, isApiError, listConsumers, type DurableDefinition, type EnsureOptions } from './ensure.ts';
import { ConfigError } from '../src/errors.ts';

export const DELIVERIES_PREFIX = 'DELIVERIES_';
/** Largest message a DELIVERIES stream stores, headers included. */
export const DELIVERY_MAX_MSG_SIZE = 512 * 1024;
/** Largest delivery body the router publishes: the rest is room for its headers (well under 1 KiB). */
export const DELIVERY_MAX_BODY = DELIVERY_MAX_MSG_SIZE - 4 * 1024;
/** Deliveries one endpoint's queue holds at most by default (HOOKSTREAM_MAX_QUEUED); beyond it a new one is refused. */
export const MAX_QUEUED_PER_ENDPOINT = 100_000;
/**
 * How long a delivery stays queued at most by default (HOOKSTREAM_QUEUE_RETENTION, issue 22): then NATS
 * removes it unsent. Shorter than the erasure index's 30 days, so erasure finds every queued delivery.
 */
export const QUEUE_RETENTION_MS = 28 * 24 * 3600_000;
/** nats-server's answer to a publish past a subject's limit with discard_new_per_subject (10077). */
export const QUEUE_FULL_CODE = 10077;
/**
 * Consumers (endpoints) one delivery stream takes. nats-server 2.15 caps every stream at 1,000 consumers
 * unless the stream sets a positive limit of its own (measured, bench/nats-primitives.ts); 2.10 has no cap
 * but slows long before this many (10,000 on one stream: 81 s to create, 512 MB).
 */
export const DELIVERY_MAX_CONSUMERS = 100_000;

/**
 * Whether the delivery streams answer direct gets, which the ordering gate reads keyed deliveries with
 * (src/nats/next-by-subject.ts): not with replicas, one of which could answer before it has what its
 * leader stored.
 */
export const directGets = (replicas = 1): boolean => replicas <= 1;

/** Headers of a delivery message (the body is the exact JSON body to POST). */
export const DeliveryHeader = {
  WebhookId: 'webhook-id',
  Event: 'hookstream-event',
  Tenant: 'hookstream-tenant',
  Endpoint: 'hookstream-endpoint',
  /** Set on a replayed dead letter: how many times it was replayed. */
  Replay: 'hookstream-replay',
  /**
   * The endpoint's version (ENDPOINTS sequence) the router saw when it routed the event: the delivery
   * role drops a delivery routed before the endpoint's latest restore (it was routed before a delete).
   */
  EndpointVersion: 'hookstream-endpoint-version',
  /** The event's EVENTS sequence (issue 17): the delivery role writes down under it that the delivery is stored. */
  EventSeq: 'hookstream-event-seq',
  /** The ordering key of a delivery on a per-key subject (issue 21), in plain. */
  OrderingKey: 'hookstream-ordering-key',
  /**
   * On a keyed delivery: once the router's floor is at this EVENTS sequence, every earlier event of its
   * tenant is handled (src/router/tenant-progress.ts). Without it, the event's sequence - 1.
   */
  OrderedAfter: 'hookstream-ordered-after',
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

/** The most HOOKSTREAM_DELIVERY_SHARDS may be: nats.conf lets the admin user delete in DELIVERIES_0 to _255 by name. */
export const MAX_DELIVERY_SHARDS = 256;

export const deliveryStream = (shard: number) => `${DELIVERIES_PREFIX}${shard}`;

/**
 * Where the router marks, in a delivery stream, that a delivery before the marker may be stored after a
 * later event's (issue 21, src/router/late-marks.ts). No endpoint's consumer reads it.
 */
export const lateMarkSubject = (stream: string) => `deliveries.${stream.slice(DELIVERIES_PREFIX.length)}.late`;

export interface DeliveryAddress {
  stream: string;
  subject: string;
}

export function deliveryAddress(endpointId: string, shards: number): DeliveryAddress {
  const shard = shardOf(endpointId, shards);
  return { stream: deliveryStream(shard), subject: `deliveries.${shard}.${endpointId}` };
}

// Issue 21: an endpoint with `ordering: key` gets each keyed delivery on a subject of its key,
// `deliveries.<n>.<endpointId>.k.<token>` in the same stream, read by a second consumer of its own (named
// below; consumer names cannot hold '.'), so the stream itself tells the oldest delivery of a key still
// waiting (src/delivery/ordered-gate.ts). Unkeyed deliveries and replays keep the plain subject.
const KEYED_SUFFIX = '-key';

/** What every per-key subject of an endpoint starts with. */
export const keyedPrefix = (endpointId: string, shards: number) => `${deliveryAddress(endpointId, shards).subject}.k.`;
/** The per-key subject of `token` (src/domain/ordering-key.ts) at an endpoint. */
export const keyedSubject = (endpointId: string, shards: number, token: string) => `${keyedPrefix(endpointId, shards)}${token}`;
/** Every per-key subject of an endpoint: its keyed consumer's filter. */
export const keyedSubjects = (endpointId: string, shards: number) => `${keyedPrefix(endpointId, shards)}>`;
/** The name of an endpoint's keyed consumer. */
export const keyedConsumerName = (endpointId: string) => `${endpointId}${KEYED_SUFFIX}`;

/** The endpoint a delivery consumer serves, and whether it is its keyed consumer. */
export function consumerEndpoint(consumer: string): { endpoint: string; keyed: boolean } {
  return consumer.endsWith(KEYED_SUFFIX)
    ? { endpoint: consumer.slice(0, -KEYED_SUFFIX.length), keyed: true }
    : { endpoint: consumer, keyed: false };
}

/**
 * An endpoint's backlog over both its consumers (the keyed one only when it has one): deliveries not yet
 * handed out, and those in flight or waiting for a retry. Null when it has no consumer.
 */
export async function endpointBacklog(jsm: JetStreamManager, endpointId: string, shards: number): Promise<{ pending: number; ack_pending: number } | null> {
  const { stream } = deliveryAddress(endpointId, shards);
  const infos = await Promise.all([endpointId, keyedConsumerName(endpointId)].map((name) => jsm.consumers.info(stream, name).catch((e: unknown) => {
    if (isApiError(e, JetStreamApiCodes.ConsumerNotFound)) return null;
    throw e;
  })));
  const found = infos.filter((ci) => ci !== null);
  if (found.length === 0) return null;
  return { pending: found.reduce((n, ci) => n + ci.num_pending, 0), ack_pending: found.reduce((n, ci) => n + ci.num_ack_pending, 0) };
}

/** An endpoint's backlog on some of its consumers: messages not yet handed out, and those in flight or waiting for a retry. */
export type EndpointBacklogCount = { endpoint: string; pending: number; ack_pending: number };

/** Backlogs of the same endpoints' consumers, wherever they are, added up: one entry per endpoint. */
export function sumBacklogs(...lists: readonly EndpointBacklogCount[][]): EndpointBacklogCount[] {
  const out = new Map<string, EndpointBacklogCount>();
  for (const list of lists) {
    for (const { endpoint, pending, ack_pending } of list) {
      const b = out.get(endpoint) ?? { endpoint, pending: 0, ack_pending: 0 };
      b.pending += pending;
      b.ack_pending += ack_pending;
      out.set(endpoint, b);
    }
  }
  return [...out.values()];
}

/**
 * Every endpoint's backlog on the delivery streams, one listing per stream, an ordered endpoint's two
 * consumers added up. With direct delivery, add listDirectBacklogs (streams/direct.ts).
 */
export async function listEndpointBacklogs(jsm: JetStreamManager, shards: number): Promise<EndpointBacklogCount[]> {
  const out: EndpointBacklogCount[] = [];
  for (let shard = 0; shard < shards; shard++) {
    for await (const ci of listConsumers(jsm, deliveryStream(shard))) {
      out.push({ endpoint: consumerEndpoint(ci.name).endpoint, pending: ci.num_pending, ack_pending: ci.num_ack_pending });
    }
  }
  return sumBacklogs(out);
}

/** Whether `subject` is one of the endpoint's delivery subjects, plain or per key. */
export function isEndpointSubject(subject: string, endpointId: string, shards: number): boolean {
  const keyed = keyedPrefix(endpointId, shards);
  return subject === deliveryAddress(endpointId, shards).subject || (subject.startsWith(keyed) && !subject.slice(keyed.length).includes('.'));
}

/** Each delivery stream says in its description how many shards its set has, for the check below. */
const shardDescription = (shard: number, shards: number) => `hookstream delivery shard ${shard} of ${shards}`;
const declaredShards = (description: string | undefined): number | undefined => {
  const m = /^hookstream delivery shard \d+ of (\d+)$/.exec(description ?? '');
  return m ? Number(m[1]) : undefined;
};

export async function ensureDeliveryStreams(
  jsm: JetStreamManager, shards: number, maxQueued: number, opts?: EnsureOptions, queueRetentionMs = QUEUE_RETENTION_MS,
): Promise<void> {
  // The shard count decides where every endpoint's messages live: changing it would strand them. A set
  // another process is still creating has fewer streams than its count, so the count is read from what
  // each stream declares, never from how many exist; a stream numbered past our count is a mismatch too.
  const mismatch = (found: number) => new ConfigError(
    'HOOKSTREAM_DELIVERY_SHARDS',
    `is ${shards} but NATS holds delivery streams created with ${found}; set it to ${found} (the value they were created with) on every instance`,
  );
  const existing: { shard: number; declared: number | undefined }[] = [];
  for await (const si of jsm.streams.list(`deliveries.>`)) {
    const shard = si.config.name.startsWith(DELIVERIES_PREFIX) ? Number(si.config.name.slice(DELIVERIES_PREFIX.length)) : NaN;
    if (Number.isInteger(shard)) existing.push({ shard, declared: declaredShards(si.config.description) });
  }
  const declared = existing.find((s) => s.declared !== undefined && s.declared !== shards)?.declared;
  if (declared !== undefined) throw mismatch(declared);
  const beyond = existing.filter((s) => s.shard >= shards);
  if (beyond.length > 0) throw mismatch(Math.max(...existing.map((s) => s.shard)) + 1);
  // Streams from before the count was declared were created all at once: their number is their count.
  if (existing.length > 0 && existing.every((s) => s.declared === undefined) && existing.length !== shards) throw mismatch(existing.length);
  for (let shard = 0; shard < shards; shard++) {
    const def = {
      name: deliveryStream(shard),
      subjects: [`deliveries.${shard}.>`],
      description: shardDescription(shard, shards),
      retention: RetentionPolicy.Workqueue,
      storage: StorageType.File,
      max_msg_size: DELIVERY_MAX_MSG_SIZE,
      // nats-server refuses a window longer than max_age (only a retention of seconds, in tests, is shorter).
      duplicate_window: nanos(Math.min(2 * 60_000, queueRetentionMs)),
      // The bound on one endpoint's queue (issue 10): a disabled endpoint holds its deliveries here until
      // a restore. Past the bound JetStream refuses that endpoint's next delivery (10077), never another
      // endpoint's, and keeps the oldest, which wait for a retry or a restore: the router records the
      // refusal where operators see it (issue 17; before, the oldest were dropped in silence).
      max_msgs_per_subject: maxQueued,
      discard: DiscardPolicy.New,
      discard_new_per_subject: true,
      // Issue 22: no payload waits for ever, not even one a disabled endpoint holds. Set on existing
      // streams at start too (ensureStream updates a changed max_age in place).
      max_age: nanos(queueRetentionMs),
      max_consumers: DELIVERY_MAX_CONSUMERS,
      allow_direct: directGets(opts?.replicas),
    };
    await ensureCappedStream(jsm, def, opts);
  }
}

/**
 * The consumer of one endpoint. JetStream's redelivery backoff is the retry schedule: a failed attempt is
 * not acked and comes back after the next delay; after max_deliver the server raises the max-deliveries
 * advisory that the dead-letter role captures.
 */
export function endpointConsumer(
  endpointId: string,
  opts: { shards: number; retrySchedule: number[]; maxQueued: number; replicas?: number; keyed?: boolean },
): DurableDefinition & { filter_subject: string } {
  return {
    durable_name: opts.keyed ? keyedConsumerName(endpointId) : endpointId,
    // HOOKSTREAM_REPLICAS, as every other stream and consumer (streams/ensure.ts); absent leaves it as it is.
    ...(opts.replicas === undefined ? {} : { num_replicas: opts.replicas }),
    filter_subject: opts.keyed ? keyedSubjects(endpointId, opts.shards) : deliveryAddress(endpointId, opts.shards).subject,
    ack_policy: AckPolicy.Explicit,
    deliver_policy: DeliverPolicy.All,
    // With backoff set, nats-server uses backoff[0] as ack_wait; the delivery role calls working()
    // on attempts that run longer, so an attempt in flight is never delivered twice.
    ack_wait: nanos(opts.retrySchedule[0]!),
    backoff: opts.retrySchedule.map(nanos),
    max_deliver: opts.retrySchedule.length + 1,
    // Not the concurrency bound (the delivery role pulls only for its free lanes, src/delivery/pull-loop.ts)
    // nor the rate limit (tokens, streams/rate-limits.ts), but the room for deliveries waiting for a retry:
    // as large as the queue, so a failed delivery never takes the place of a new one (issue 17).
    max_ack_pending: opts.maxQueued,
  };
}
