// Erasure of a tenant that leaves (issue 22): everything hookstream keeps of it, store by store. Runs from
// the CLI as the service user with Postgres (it removes endpoint history from ENDPOINTS, which the admin
// NATS user may not touch). Endpoints still active are first deleted through the store (so every running
// directory drops them and the delivery role removes their consumers and queues); then their history
// (sealed secrets included) is deleted from ENDPOINTS message by message with secure erase (a purge by
// subject leaves the bytes in the store's blocks: measured on nats-server 2.9.10 and 2.15.1), and the
// snapshots that hold their state are purged whole (their block files go; the directory folds from the
// stream until the next snapshot is written).
import type { EntityManager } from '@mikro-orm/postgresql';
import { ENDPOINT_STATES_STREAM, ENDPOINTS_STREAM, endpointStateSubject, endpointSubject } from '../../streams/endpoints.ts';
import { ENDPOINT_SNAPSHOTS_STREAM } from '../../streams/endpoint-snapshots.ts';
import { ENDPOINT_HEALTH_STREAM, endpointHealthSubject } from '../../streams/endpoint-health.ts';
import { deliveryAddress, keyedConsumerName } from '../../streams/deliveries.ts';
import { ATTEMPTS_STREAM } from '../../streams/attempts.ts';
import { EVENTS_STREAM, partitionStream } from '../../streams/events.ts';
import { tenantPartition } from '../domain/partition.ts';
import { REJECTED_STREAM, rejectedTenantSubject } from '../../streams/rejected.ts';
import { ERASURE_INDEX_STREAM } from '../../streams/erasure-index.ts';
import { OPS_STREAM } from '../../streams/ops.ts';
import { Projection } from '../../projections/checkpoint.ts';
import { isApiError } from '../../streams/ensure.ts';
import { JetStreamApiCodes, type JetStreamManager } from '@nats-io/jetstream';
import { messagesOf } from './by-subject.ts';
import type { OwnedEndpointStore } from '../endpoints/store.ts';
import type { EndpointId, TenantId } from '../domain/ids.ts';
import { eraseTenantAttempts } from '../deliverylog/retention.ts';
import { destroyDataKeys } from './data-keys.ts';
import { partitionCopies } from './partition-copies.ts';
import type { NatsConnection } from '@nats-io/nats-core';
import { ErrorCode, HookstreamError } from '../errors.ts';

/** How long the tenant's erasure waits for nats-server to copy its events into their partition stream. */
const COPIES_WAIT_MS = 30_000;

export interface TenantErasureOut {
  tenant: string;
  endpoints: number;
  /** Messages (or rows) removed per store. */
  stores: {
    /** The tenant's key and its subjects' keys (DATA_KEYS): no delivery body of the tenant opens any more. */
    data_keys: number;
    endpoint_events: number;
    endpoint_snapshots: number;
    endpoint_health: number;
    deliveries: number;
    attempts: number;
    events: number;
    rejected: number;
    erasure_index: number;
    ops_events: number;
    dead_letters: number;
    api_keys: number;
    idempotency_keys: number;
    portal_sessions: number;
    endpoint_rows: number;
  };
}

export async function eraseTenant(deps: {
  jsm: JetStreamManager; nc: NatsConnection; em: EntityManager; store: OwnedEndpointStore; shards: number;
  /** HOOKSTREAM_EVENT_PARTITIONS: the tenant's events have copies in its partition stream too; absent: none. */
  partitions?: number;
  /** Resolves once the projection has applied its stream up to `seq` (the directories follow ENDPOINTS alike). */
  waitForProjection: (name: Projection, seq: number) => Promise<void>;
}, tenant: TenantId): Promise<TenantErasureOut> {
  const { jsm, em } = deps;
  const purge = async (stream: string, filter?: string): Promise<number> => {
    try {
      return (await jsm.streams.purge(stream, filter === undefined ? undefined : { filter })).purged;
    } catch (e) {
      if (isApiError(e, JetStreamApiCodes.StreamNotFound)) return 0;
      throw e;
    }
  };
  /** Delete every message of `subject` with its bytes overwritten; then purge what came meanwhile. */
  const secureErase = async (stream: string, subject: string): Promise<number> => {
    let n = 0;
    for await (const m of messagesOf(jsm, stream, subject)) {
      if (await jsm.streams.deleteMessage(stream, m.seq, true).catch(() => false)) n++;
    }
    return n + await purge(stream, subject);
  };
  const removeConsumer = (stream: string, name: string) => jsm.consumers.delete(stream, name).catch(() => false);
  const deleteRows = async (table: string): Promise<number> =>
    (await em.execute<{ n: number }[]>(`with d as (delete from ${table} where tenant = ? returning 1) select count(*)::int as n from d`, [tenant]))[0]?.n ?? 0;

  const rows = await em.execute<{ id: EndpointId; status: string }[]>('select id, status from endpoints where tenant = ?', [tenant]);
  const out: TenantErasureOut = {
    tenant, endpoints: rows.length,
    stores: {
      data_keys: 0, endpoint_events: 0, endpoint_snapshots: 0, endpoint_health: 0, deliveries: 0, attempts: 0, events: 0, rejected: 0,
      erasure_index: 0, ops_events: 0, dead_letters: 0, api_keys: 0, idempotency_keys: 0, portal_sessions: 0, endpoint_rows: 0,
    },
  };
  const s = out.stores;
  // Deleted first (a command every directory applies), so no router routes to them while they go; their
  // history is purged only once the deletes have been read (a directory that never saw one would keep routing).
  let lastDelete = 0;
  for (const r of rows) {
    if (r.status === 'deleted') continue;
    const done = await deps.store.delete(tenant, r.id).catch(() => undefined);
    if (done) lastDelete = Math.max(lastDelete, done.seq);
  }
  // Their states are saved behind the deletes: written before the states are erased below. (A save by
  // another process that lands after the erasure removes itself: saveEndpointState.)
  await deps.store.flush();
  if (lastDelete > 0) await deps.waitForProjection(Projection.Endpoints, lastDelete);
  // Nothing is routed to the tenant any more: its keys go, and with them every copy of its delivery
  // bodies anywhere (acknowledged deliveries' bytes, replicas, dead letters, backups of the queues).
  s.data_keys = await destroyDataKeys(deps, tenant, 'all');
  for (const { id } of rows) {
    const address = deliveryAddress(id, deps.shards);
    await removeConsumer(address.stream, id);
    await removeConsumer(address.stream, keyedConsumerName(id));
    // Its direct consumer (streams/direct.ts), with partitions.
    if (deps.partitions) await removeConsumer(partitionStream(tenantPartition(tenant, deps.partitions)), id);
    s.deliveries += await purge(address.stream, address.subject);
    s.deliveries += await purge(address.stream, `${address.subject}.>`);
    s.attempts += await purge(ATTEMPTS_STREAM, `attempts.${id}.>`);
    s.endpoint_health += await purge(ENDPOINT_HEALTH_STREAM, endpointHealthSubject(id));
    s.endpoint_events += await secureErase(ENDPOINTS_STREAM, endpointSubject(id));
    // Its saved state (a copy of what the events make, sealed secrets included) goes with them.
    await secureErase(ENDPOINT_STATES_STREAM, endpointStateSubject(id));
  }
  // Snapshots hold every tenant's endpoints in one blob: all go, the next is written 10,000 events on.
  if (rows.length > 0) s.endpoint_snapshots = await purge(ENDPOINT_SNAPSHOTS_STREAM);
  // The partition copies of every event stored so far are made before both purges (a copy made after
  // the partition stream's purge would stay); an event published meanwhile stays, as it does in EVENTS.
  const copies = partitionCopies(jsm, deps.partitions ?? 0, tenant);
  if (copies && !await copies.caughtUp(COPIES_WAIT_MS)) {
    throw new HookstreamError(ErrorCode.Unavailable, `nats-server has not copied the tenant's events into ${copies.stream} for ${COPIES_WAIT_MS / 1000} s (a cluster electing a leader?): run the erasure again`);
  }
  // The event index (there with the partitions) has read the tenant's newest event: no row of an event
  // purged below comes back.
  const newest = copies ? await jsm.streams.getMessage(EVENTS_STREAM, { last_by_subj: `events.${tenant}.>` }) : null;
  if (newest) await deps.waitForProjection(Projection.EventIndex, newest.seq);
  s.events = await purge(EVENTS_STREAM, `events.${tenant}.>`);
  if (copies) s.events += await purge(copies.stream, `events.${tenant}.>`);
  s.rejected = await purge(REJECTED_STREAM, rejectedTenantSubject(tenant));
  // Index rows, once the projection has applied what the routers wrote (a batch applied later would bring
  // some back); then the applied batches (they name other tenants too) leave the stream, as the projection
  // trims them anyway.
  const indexEnd = (await jsm.streams.info(ERASURE_INDEX_STREAM)).state.last_seq;
  await deps.waitForProjection(Projection.ErasureIndex, indexEnd);
  s.erasure_index = await deleteRows('erasure_index');
  await jsm.streams.purge(ERASURE_INDEX_STREAM, { seq: indexEnd + 1 });
  s.attempts += await eraseTenantAttempts(deps, em, tenant);
  s.ops_events = await purge(OPS_STREAM, `ops.${tenant}.>`);
  s.dead_letters = await deleteRows('dead_letters');
  s.api_keys = await deleteRows('api_keys');
  s.idempotency_keys = await deleteRows('idempotency_keys');
  s.portal_sessions = await deleteRows('portal_sessions');
  s.endpoint_rows = await deleteRows('endpoints');
  return out;
}
