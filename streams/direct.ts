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

/** The patterns a direct consumer's filter subjects stand for: directFilters' inverse. */
export function filterPatterns(subjects: readonly string[]): EventPattern[] {
  return subjects.map((s) => {
    // events.<tenant>.<p>.<type>
    const type = s.split('.').slice(3).join('.');
    return (type === '>' ? '*' : type.endsWith('.>') ? `${type.slice(0, -2)}.*` : type) as EventPattern;
  });
}

/** Whether the filter subjects `current` take every subject of `wanted` (both directFilters'). */
export const filtersCover = (current: readonly string[], wanted: readonly string[]): boolean =>
  wanted.every((w) => current.some((c) => c === w || (c.endsWith('>') && w.startsWith(c.slice(0, -1)))));

/**
 * What a consumer filtered by `current` is set to for `events`: those subjects when they take them all and
 * it may not narrow, else with them added, or exactly them when it may narrow.
 *
 * Never narrowed at once: nats-server moves a consumer's read position past every message its filter does
 * not take, and never goes back (2.10's getNextMsg), so an event of a type a PATCH adds, stored before the
 * filter takes it, would be skipped for good. The API widens the filter before it stores such a PATCH
 * (widenDirectConsumer); a reconcile acting on the state before it must not undo that.
 */
function nextFilters(current: readonly string[] | undefined, tenant: string, partitions: number, events: readonly EventPattern[], narrow: boolean): string[] {
  const wanted = directFilters(tenant, partitions, events);
  if (!current || narrow) return wanted;
  return filtersCover(current, wanted) ? [...current] : directFilters(tenant, partitions, [...filterPatterns(current), ...events]);
}

/**
 * Before a PATCH that sets an endpoint's `events` is stored: its direct consumer, if it has one, takes
 * those types too, so an event of a new type stored after the PATCH is never skipped (nextFilters). The
 * delivery role acks unsent a type the endpoint does not take, once its view of the endpoints covers the
 * copy; a reconcile narrows the filter once the endpoint is unchanged for a while.
 */
export async function widenDirectConsumer(jsm: JetStreamManager, endpoint: DirectEndpoint, partitions: number): Promise<void> {
  const ci = await directConsumerInfo(jsm, endpoint, partitions);
  if (!ci || !isDirectConsumer(ci)) return;
  const current = ci.config.filter_subjects ?? [];
  const next = nextFilters(current, endpoint.tenant, partitions, endpoint.events, false);
  if (next.join() !== current.join()) await jsm.consumers.update(ci.stream_name, ci.name, { filter_subjects: next });
}

/** What a direct consumer is set to, but its filter and where it starts (fixed at its creation). */
function directSettings(opts: { retrySchedule: number[]; maxQueued: number }): Partial<ConsumerConfig> {
  return {
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

/** An endpoint's direct consumer after ensureDirectConsumer: its filter, and whether it was made or widened now. */
export type DirectConsumerSet = { filters: string[]; created: boolean; widened: boolean };

/**
 * Create the endpoint's direct consumer, starting at `start()`, or bring an existing one's settings in
 * line (where it reads is left as it is; its filter narrowed only with `narrow`, nextFilters). `start()`
 * undefined: none is made (direct delivery is turned off before it would start); then undefined.
 */
export async function ensureDirectConsumer(
  jsm: JetStreamManager, endpoint: DirectEndpoint, partitions: number,
  opts: { retrySchedule: number[]; maxQueued: number; replicas?: number; narrow?: boolean }, start: () => Promise<number | undefined>, known?: ConsumerConfig,
): Promise<DirectConsumerSet | undefined> {
  const { stream } = directAddress(endpoint, partitions);
  let current = known;
  if (!current) {
    current = await jsm.consumers.info(stream, endpoint.id).then((ci) => ci.config, (e: unknown) => {
      if (isApiError(e, JetStreamApiCodes.ConsumerNotFound)) return undefined;
      throw e;
    });
  }
  const filters = nextFilters(current?.filter_subjects, endpoint.tenant, partitions, endpoint.events, opts.narrow ?? false);
  const settings = { ...directSettings(opts), filter_subjects: filters, ...(opts.replicas === undefined ? {} : { num_replicas: opts.replicas }) };
  if (current) {
    const stale = (Object.keys(settings) as (keyof ConsumerConfig)[]).some((k) => JSON.stringify(current[k]) !== JSON.stringify(settings[k]));
    if (stale) await jsm.consumers.update(stream, endpoint.id, settings);
    return { filters, created: false, widened: !filtersCover(current.filter_subjects ?? [], filters) };
  }
  const from = await start();
  if (from === undefined) return undefined;
  const def: DurableDefinition = {
    ...settings, durable_name: endpoint.id,
    deliver_policy: DeliverPolicy.StartTime, opt_start_time: new Date(from).toISOString(),
  };
  try {
    await jsm.consumers.add(stream, def);
  } catch (e) {
    // Another instance made it meanwhile (its start is as good as ours): brought in line as an existing one.
    if (!isApiError(e, ApiCode.ConsumerNameExist) && !isApiError(e, ApiCode.ConsumerAlreadyExists)) throw e;
    return ensureDirectConsumer(jsm, endpoint, partitions, opts, start);
  }
  return { filters, created: true, widened: false };
}
