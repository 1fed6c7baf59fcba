// Direct delivery (HOOKSTREAM_DIRECT_DELIVERY, the delivery path's next shape, docs/architecture.md): an
// endpoint without ordering reads its events from its tenant's partition stream EVENTS_<p> through a
// durable consumer of its own, named as the endpoint, filtered to the tenant's events of the types it
// takes. Its retries are the consumer's backoff and its dead letters the max-deliveries advisory, as on
// the delivery streams.
//
// Filtered by type at the server, not by the delivery role after the fact: where each of a tenant's
// endpoints takes some of its types (10 endpoints, one type each), a filter of all the tenant's events
// cost nats-server 170-190 µs per delivery against 65-95 µs for the router's queues (`npm run bench --
// --only one`, 2.10.27), each event handed to and acked by every endpoint.
import { AckPolicy, DeliverPolicy, JetStreamApiCodes, type ConsumerConfig, type ConsumerInfo, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { tenantPartition } from '../src/domain/partition.ts';
import type { EventPattern } from '../src/domain/catalogue.ts';
import { isEndpointId } from '../src/domain/ids.ts';
import type { EndpointBacklogCount } from './deliveries.ts';
import { ENDPOINTS_STREAM } from './endpoints.ts';
import { partitionStream } from './events.ts';
import { ApiCode, isApiError, listConsumers, type DurableDefinition } from './ensure.ts';

/**
 * How far before its start an endpoint's consumer reads: the clocks of a cluster's servers (the leader
 * of ENDPOINTS or EVENTS against that of the partition stream) may differ by this much. An event stored
 * within it before the endpoint's start is delivered too; none after it is missed.
 */
export const DIRECT_START_SLACK_MS = 1000;

/** What of an endpoint its direct consumer follows. */
export type DirectEndpoint = { id: string; tenant: string; events: readonly EventPattern[] };

/** Where an endpoint's direct consumer is. */
export const directAddress = (endpoint: { id: string; tenant: string }, partitions: number) =>
  ({ stream: partitionStream(tenantPartition(endpoint.tenant, partitions)), consumer: endpoint.id });

/**
 * Whether a consumer of a partition stream is an endpoint's direct consumer: durable and named as an
 * endpoint. Others may read the stream too (an operator's `nats consumer`, a client's ordered consumer,
 * with generated names); they are no endpoint's backlog.
 */
export const isDirectConsumer = (ci: Pick<ConsumerInfo, 'name' | 'config'>): boolean =>
  ci.config.durable_name === ci.name && isEndpointId(ci.name);

/**
 * Every direct consumer's backlog, one listing per partition stream: copies not yet handed out, and
 * those in flight or waiting for a retry. None with `partitions` 0 (no direct delivery). Callers add it
 * to the delivery streams' (sumBacklogs).
 */
export async function listDirectBacklogs(jsm: JetStreamManager, partitions: number): Promise<EndpointBacklogCount[]> {
  const out: EndpointBacklogCount[] = [];
  for (let p = 0; p < partitions; p++) {
    for await (const ci of listConsumers(jsm, partitionStream(p))) {
      if (isDirectConsumer(ci)) out.push({ endpoint: ci.name, pending: ci.num_pending, ack_pending: ci.num_ack_pending });
    }
  }
  return out;
}

/** How many endpoints' direct consumers the partition streams hold (turning direct delivery on again waits for none). */
export async function countDirectConsumers(jsm: JetStreamManager, partitions: number): Promise<number> {
  return (await listDirectBacklogs(jsm, partitions)).length;
}

/** An endpoint's direct consumer's info; null when it has none (ordered, deleted, or not made yet). */
export async function directConsumerInfo(jsm: JetStreamManager, endpoint: { id: string; tenant: string }, partitions: number): Promise<ConsumerInfo | null> {
  const { stream, consumer } = directAddress(endpoint, partitions);
  return jsm.consumers.info(stream, consumer).catch((e: unknown) => {
    if (isApiError(e, JetStreamApiCodes.ConsumerNotFound)) return null;
    throw e;
  });
}

/**
 * The subjects of the tenant's events of `events` (the endpoint's patterns, src/domain/catalogue.ts) in its
 * partition, none covering another: nats-server refuses overlapping filters. `user.*` takes every
 * `user.<…>`, so it is `user.>` (an event name has two or three tokens).
 */
export function directFilters(tenant: string, partitions: number, events: readonly EventPattern[]): string[] {
  const base = `events.${tenant}.${tenantPartition(tenant, partitions)}.`;
  if (events.includes('*')) return [`${base}>`];
  const families = events.filter((e) => e.endsWith('.*')).map((e) => e.slice(0, -1));
  const out = new Set<string>();
  for (const e of events) {
    if (e.endsWith('.*')) out.add(`${base}${e.slice(0, -2)}.>`);
    else if (!families.some((f) => e.startsWith(f))) out.add(`${base}${e}`);
  }
  return [...out].sort();
}

/** What a direct consumer is set to, but where it starts (fixed at its creation). */
function directSettings(endpoint: DirectEndpoint, partitions: number, opts: { retrySchedule: number[]; maxQueued: number }): Partial<ConsumerConfig> {
  return {
    filter_subjects: directFilters(endpoint.tenant, partitions, endpoint.events),
    ack_policy: AckPolicy.Explicit,
    // As an endpoint's consumer of its delivery stream (streams/deliveries.ts, endpointConsumer).
    ack_wait: nanos(opts.retrySchedule[0]!),
    backoff: opts.retrySchedule.map(nanos),
    max_deliver: opts.retrySchedule.length + 1,
    max_ack_pending: opts.maxQueued,
  };
}

/**
 * The time an endpoint's direct consumer starts reading from, if it had to be made now: when the endpoint
 * last changed (its ENDPOINTS event of `version`, as nats-server stored it: a create, a restore, the switch
 * to no ordering; or the time the event names, should it be gone), and never before direct delivery
 * started, less the slack.
 */
export async function directStart(jsm: JetStreamManager, endpoint: { version: number; updatedAt: string }, since: number): Promise<number> {
  const changed = await jsm.streams.getMessage(ENDPOINTS_STREAM, { seq: endpoint.version }).catch(() => null);
  return Math.max(since, changed ? changed.time.getTime() : Date.parse(endpoint.updatedAt)) - DIRECT_START_SLACK_MS;
}

/**
 * Create the endpoint's direct consumer, starting at `start()`, or bring an existing one's settings in
 * line (where it reads is left as it is). `start()` undefined: none is made (direct delivery is turned off
 * before it would start). Whether the endpoint has one now.
 */
export async function ensureDirectConsumer(
  jsm: JetStreamManager, endpoint: DirectEndpoint, partitions: number,
  opts: { retrySchedule: number[]; maxQueued: number; replicas?: number }, start: () => Promise<number | undefined>, known?: ConsumerConfig,
): Promise<boolean> {
  const { stream } = directAddress(endpoint, partitions);
  const settings = { ...directSettings(endpoint, partitions, opts), ...(opts.replicas === undefined ? {} : { num_replicas: opts.replicas }) };
  let current = known;
  if (!current) {
    current = await jsm.consumers.info(stream, endpoint.id).then((ci) => ci.config, (e: unknown) => {
      if (isApiError(e, JetStreamApiCodes.ConsumerNotFound)) return undefined;
      throw e;
    });
  }
  if (current) {
    const stale = (Object.keys(settings) as (keyof ConsumerConfig)[]).some((k) => JSON.stringify(current[k]) !== JSON.stringify(settings[k]));
    if (stale) await jsm.consumers.update(stream, endpoint.id, settings);
    return true;
  }
  const from = await start();
  if (from === undefined) return false;
  const def: DurableDefinition = {
    ...settings, durable_name: endpoint.id,
    deliver_policy: DeliverPolicy.StartTime, opt_start_time: new Date(from).toISOString(),
  };
  await jsm.consumers.add(stream, def).catch((e: unknown) => {
    // Another instance made it meanwhile (its start is as good as ours).
    if (!isApiError(e, ApiCode.ConsumerNameExist) && !isApiError(e, ApiCode.ConsumerAlreadyExists)) throw e;
  });
  return true;
}
