// The event index (projections/event-index.ts): with HOOKSTREAM_EVENT_PARTITIONS set, every event's index
// rows come from EVENTS, and the routers index only the events they stored deliveries of. On the real
// nats-server and Postgres: an event no endpoint takes is found by erasure through the event index alone;
// an event with a queued delivery has one row naming it, whichever writer came first; and while the event
// index is held back, erasure reads its tail of EVENTS instead.
import test from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { insertIndexRows } from '../src/erasure/index-store.ts';
import { EVENTS_STREAM } from '../streams/events.ts';
import { ERASURE_INDEX_STREAM, type IndexedEvent } from '../streams/erasure-index.ts';
import { Projection, readCheckpoint } from '../projections/checkpoint.ts';

let h: TestService;
let admin: AdminClient;

test.before(async () => {
  // Partitions without direct delivery: the routers index the deliveries they queue (pinned).
  h = await startTestService('event_index', { HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_EVENT_PARTITIONS: '4', HOOKSTREAM_RETRY_SCHEDULE: '1h' });
  ({ admin } = await h.operator({ timeoutMs: 60_000 }));
});

test.after.always(() => h?.closeAll());

const sql = <T extends object>(q: string, params: unknown[] = []) => h.service.orm!.em.fork().execute<T[]>(q, params);
const rowsOf = (tenant: string, seq: number) =>
  sql<{ deliveries: [string, number, string][] }>('select deliveries from erasure_index where tenant = ? and events_seq = ?', [tenant, seq]);
const indexBatches = async () => (await h.service.jsm.streams.info(ERASURE_INDEX_STREAM)).state.last_seq;
const routed = async (seq: number) => {
  const c = await h.service.jsm.consumers.info(EVENTS_STREAM, 'router');
  return c.ack_floor.stream_seq >= seq || (c.num_ack_pending === 0 && c.delivered.stream_seq >= seq);
};

test.serial('an event no endpoint takes is indexed from EVENTS alone, and erased through its row', async (t) => {
  const tenant = 'tenant_idx_alone' as TenantId;
  const batches = await indexBatches();
  const { seq } = await h.publish(tenant, 'user.created', { userId: 'user_alone' });
  await eventually(async () => ((await rowsOf(tenant, seq)).length === 1 ? true : undefined), 30_000, 'the event index row');
  await eventually(async () => (await routed(seq) ? true : undefined), 30_000, 'routed');
  await new Promise((r) => setTimeout(r, 200));
  t.is(await indexBatches(), batches, 'the router wrote no index entry: it stored no delivery');
  t.deepEqual((await rowsOf(tenant, seq)).map((r) => r.deliveries), [[]]);

  const out = await admin.eraseSubject({ tenant, user: 'user_alone' });
  t.is(out.stores.events.erased, 1, 'found through the event index');
  t.is(out.stores.unrouted_events.erased, 0);
  t.is(await h.service.jsm.streams.getMessage(EVENTS_STREAM, { seq }), null);
  t.deepEqual(await rowsOf(tenant, seq), []);
});

test.serial('an event with a queued delivery has one row with that delivery, and erasure reaches the delivery', async (t) => {
  const tenant = 'tenant_idx_queued' as TenantId;
  const r = await h.receiver(() => 503);
  await h.store.create(tenant, { url: r.url, events: ['user.*'] });
  const { seq } = await h.publish(tenant, 'user.updated', { userId: 'user_queued' });
  await r.waitFor(1);
  const rows = await eventually(async () => {
    const found = await rowsOf(tenant, seq);
    return found.length === 1 && found[0]!.deliveries.length === 1 ? found : undefined;
  }, 30_000, 'the row with its delivery');
  t.is(await readCheckpoint(h.service.orm!, Projection.EventIndex) >= seq, true, 'the event index read it too');
  t.regex(rows[0]!.deliveries[0]![0], /^DELIVERIES_\d+$/);

  const out = await admin.eraseSubject({ tenant, user: 'user_queued' });
  t.is(out.stores.events.erased, 1);
  t.is(out.stores.deliveries.erased, 1, 'the copy waiting for its retry');
});

test.serial('both writers\' rows of one event merge, in either order and applied again', async (t) => {
  const em = h.service.orm!.em.fork();
  const row = (seq: number, deliveries: [string, number, string][]): IndexedEvent =>
    ({ tenant: 'tenant_idx_merge', hashes: ['0'.repeat(32), 'f'.repeat(32)], events_seq: seq, webhook_id: 'msg_merge', deliveries });
  const a: [string, number, string] = ['DELIVERIES_0', 7, 'ep_a'];
  const b: [string, number, string] = ['DELIVERIES_1', 9, 'ep_b'];
  const stored = async (seq: number) => (await sql<{ deliveries: unknown }>(
    'select deliveries from erasure_index where tenant = ? and events_seq = ? order by subject_hash', ['tenant_idx_merge', seq])).map((x) => x.deliveries);

  // The event index first, then the router; the router's batch again.
  await insertIndexRows(em, [row(1, [])]);
  await insertIndexRows(em, [row(1, [a])]);
  await insertIndexRows(em, [row(1, [a])]);
  t.deepEqual(await stored(1), [[a], [a]]);
  // The router first (a fan-out stored in two tries, both in one batch), then the event index.
  await insertIndexRows(em, [row(2, [a]), row(2, [b])]);
  await insertIndexRows(em, [row(2, [])]);
  t.deepEqual(await stored(2), [[a, b], [a, b]]);
});

test.serial('while the event index is held back, erasure reads the tail of EVENTS past it instead', async (t) => {
  const tenant = 'tenant_idx_behind' as TenantId;
  let seq = 0;
  // The event index's checkpoint row locked: its projector waits, as behind a long Postgres stall.
  const out = await h.service.orm!.em.fork().transactional(async (tx) => {
    await tx.execute('select last_seq from projection_checkpoints where name = ? for update', [Projection.EventIndex]);
    seq = (await h.publish(tenant, 'user.created', { userId: 'user_behind' })).seq;
    await eventually(async () => (await routed(seq) ? true : undefined), 30_000, 'routed');
    t.true(await readCheckpoint(h.service.orm!, Projection.EventIndex) < seq, 'not indexed yet');
    return admin.eraseSubject({ tenant, user: 'user_behind' });
  });
  t.is(out.stores.unrouted_events.erased, 1);
  t.is(await h.service.jsm.streams.getMessage(EVENTS_STREAM, { seq }), null);
  // Released, the event index goes on past it; a second run finds nothing more to erase.
  await eventually(async () => (await readCheckpoint(h.service.orm!, Projection.EventIndex) >= seq ? true : undefined), 30_000, 'the event index went on');
  const again = await admin.eraseSubject({ tenant, user: 'user_behind' });
  t.is(again.stores.events.erased + again.stores.unrouted_events.erased, 0);
});
