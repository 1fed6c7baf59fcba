// The erasure index (issue 22) with the real NATS and Postgres: the router's batches become rows keyed by
// tenant and subject hash; erasure finds a subject's entries whether the projection has applied them or
// not; a message the projection cannot use is skipped alone; applied batches leave the stream; rows past
// their retention go; a tenant's erasure leaves none of its rows.
import test from 'ava';
import { connect, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { MikroORM } from '@mikro-orm/postgresql';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import { createTestDatabase, type TestDatabase } from './helpers/database.ts';
import { eventually } from './helpers/service.ts';
import { ensureStreams } from '../streams/index.ts';
import { EVENTS_STREAM } from '../streams/events.ts';
import { ERASURE_BATCH_SUBJECT, ERASURE_INDEX_STREAM, erasureSubject, type ErasureIndexBatch, type IndexedEvent } from '../streams/erasure-index.ts';
import { generateKeys, initSodium } from '../src/crypto/sodium.ts';
import { openDatabase, closeDatabase } from '../src/db/orm.ts';
import { createLogger } from '../src/log.ts';
import { createErasure, type Erasure } from '../src/erasure/erase.ts';
import { subjectHasherOf, type SubjectHasher } from '../src/erasure/subject-hash.ts';
import { createDeadLetterOpener } from '../src/admin/opener.ts';
import { deadLetterTaggerOf } from '../src/deadletter/tag.ts';
import { startErasureIndexProjector, type ErasureIndexProjector } from '../projections/erasure-index.ts';
import { Projection, readSkipped } from '../projections/checkpoint.ts';
import { startErasureIndexRetention } from '../src/erasure/index-retention.ts';
import { createAckedPublisher } from '../src/nats/acked-publisher.ts';
import { createErasureIndexWriter } from '../src/erasure/index-writer.ts';

let nats: NatsServer;
let db: TestDatabase;
let nc: NatsConnection;
let jsm: JetStreamManager;
let orm: MikroORM;
let hasher: SubjectHasher;
let erasure: Erasure;
const log = createLogger({ level: 'error' });

test.before(async () => {
  await initSodium();
  nats = await startNatsServer();
  db = await createTestDatabase('erasure_index');
  nc = await connect({ servers: nats.url });
  jsm = await jetstreamManager(nc);
  await ensureStreams(jsm, { shards: 1, maxQueued: 1000, retrySchedule: [1000], replicas: 1 });
  orm = await openDatabase(db.url, log);
  const keys = generateKeys();
  hasher = subjectHasherOf(keys.masterKey);
  const opener = await createDeadLetterOpener(deadLetterTaggerOf(keys.masterKey), keys.deadLetterSecretKey);
  erasure = createErasure({ jsm, orm, hasher, opener, log });
});
test.after.always(async () => {
  await closeDatabase(orm).catch(() => {});
  await nc?.close();
  await nats?.dispose();
  await db?.drop();
});

const js = () => jetstream(nc);
const until = (cond: () => Promise<boolean>, what: string) => eventually(async () => (await cond()) || undefined, 30_000, what);
const startProjector = (trimEveryMs = 60_000): Promise<ErasureIndexProjector> => startErasureIndexProjector({ js: js(), orm, log }, { trimEveryMs });
const rows = async (tenant: string): Promise<number> =>
  Number((await orm.em.fork().execute<{ n: string }[]>('select count(*) as n from erasure_index where tenant = ?', [tenant]))[0]!.n);

/** A user's event in EVENTS and a delivery of it in DELIVERIES_0, as the router stores them; its index entry. */
async function routedEvent(tenant: string, userId: string): Promise<IndexedEvent> {
  const e = await js().publish(`events.${tenant}.user.updated`, JSON.stringify({ userId }));
  const d = await js().publish('deliveries.0.webhook_idx', JSON.stringify({ type: 'user.updated', data: { userId } }));
  return { tenant, hashes: [hasher.hash({ kind: 'user', id: userId })], events_seq: e.seq, webhook_id: 'msg_idx', deliveries: [['DELIVERIES_0', d.seq, 'webhook_idx']] };
}
const writeBatch = (entries: IndexedEvent[]) => js().publish(ERASURE_BATCH_SUBJECT, JSON.stringify({ v: 2, entries } satisfies ErasureIndexBatch));
const stored = async (stream: string, seq: number) => (await jsm.streams.getMessage(stream, { seq }).catch(() => null)) !== null;

test.serial('the router writes one index message for many events, and each event waits for it', async (t) => {
  const publisher = createAckedPublisher(nc, { timeoutMs: 5000 });
  const writer = createErasureIndexWriter({ publisher, hasher, batchMs: 20 });
  const before = (await jsm.streams.info(ERASURE_INDEX_STREAM)).state.last_seq;
  await Promise.all(Array.from({ length: 50 }, (_, i) =>
    writer.record({ tenant: 'tenant_w', data: { userId: `user_${i}`, organizationId: 'org_w' }, eventsSeq: i + 1, webhookId: 'msg_w', orderingKey: undefined, deliveries: [] })));
  // Every record() has resolved: its batch is stored.
  const after = (await jsm.streams.info(ERASURE_INDEX_STREAM)).state.last_seq;
  t.is(after - before, 1, 'one batch for 50 events');
  const m = (await jsm.streams.getMessage(ERASURE_INDEX_STREAM, { seq: after }))!;
  const batch = m.json<ErasureIndexBatch>();
  t.is(batch.entries.length, 50);
  t.deepEqual(batch.entries[3]!.hashes, [hasher.hash({ kind: 'user', id: 'user_3' }), hasher.hash({ kind: 'organization', id: 'org_w' })]);
  t.false(m.string().includes('user_3'), 'the index names no id');
  // An event that names no subject is not written at all.
  await writer.record({ tenant: 'tenant_w', data: {}, eventsSeq: 99, webhookId: 'msg_w', orderingKey: undefined, deliveries: [] });
  t.is((await jsm.streams.info(ERASURE_INDEX_STREAM)).state.last_seq, after);
  publisher.close();
});

test.serial('erasure finds entries the projection has not applied (from the stream) and those it has (from Postgres)', async (t) => {
  const tenant = 'tenant_idx';
  // Applied: written while a projector runs, then it stops.
  const projector = await startProjector();
  const early = await routedEvent(tenant, 'user_a');
  const kept = await routedEvent(tenant, 'user_b');
  const otherTenant = await routedEvent('tenant_idx_other', 'user_a');
  await writeBatch([early, kept, otherTenant]);
  await until(async () => (await rows(tenant)) === 2, 'applied');
  await projector.stop();
  // Not applied: written with no projector running.
  const late = await routedEvent(tenant, 'user_a');
  await writeBatch([late]);

  const out = await erasure.eraseSubject(tenant, { kind: 'user', id: 'user_a' }, { routingWaitMs: 0, projectionWaitMs: 0 });
  t.like(out.stores, { index: { entries: 2, erased: 1, unapplied_scanned: 1 }, deliveries: { erased: 2, already_gone: 0 } });
  // No router runs here: the events count as not yet routed, and are erased as such.
  t.is(out.stores.events.erased + out.stores.unrouted_events.erased, 2);
  for (const e of [early, late]) {
    t.false(await stored(EVENTS_STREAM, e.events_seq));
    t.false(await stored('DELIVERIES_0', e.deliveries[0]![1]));
  }
  for (const e of [kept, otherTenant]) {
    t.true(await stored(EVENTS_STREAM, e.events_seq), 'another user, another tenant: untouched');
    t.true(await stored('DELIVERIES_0', e.deliveries[0]![1]));
  }
  t.is(await rows(tenant), 1, "only user_b's row is left");
  t.is(await rows('tenant_idx_other'), 1);
});

test.serial('a message the projection cannot use is skipped alone; version 1 entries are still read', async (t) => {
  const tenant = 'tenant_poison';
  const good = await routedEvent(tenant, 'user_p');
  const v1 = await routedEvent(tenant, 'user_p');
  const poison = await js().publish(ERASURE_BATCH_SUBJECT, JSON.stringify({ v: 2, entries: [{ ...good, tenant: 'tenant with spaces' }] }));
  await js().publish(ERASURE_BATCH_SUBJECT, '{not json');
  await js().publish(erasureSubject(tenant, v1.hashes[0]!), JSON.stringify({ v: 1, events_seq: v1.events_seq, webhook_id: v1.webhook_id, deliveries: v1.deliveries }));
  await writeBatch([good]);
  const projector = await startProjector();
  await until(async () => (await rows(tenant)) === 2, 'the good batch and the version 1 entry are applied');
  await projector.stop();
  const skipped = await readSkipped(orm, Projection.ErasureIndex);
  t.true(skipped.latest.some((s) => s.seq === poison.seq && /tenant is not a tenant id/.test(s.reason)));
  t.true(skipped.latest.some((s) => s.reason === 'not JSON'));
  const out = await erasure.eraseSubject(tenant, { kind: 'user', id: 'user_p' }, { routingWaitMs: 0, projectionWaitMs: 0 });
  t.like(out.stores, { index: { entries: 2, erased: 2 }, deliveries: { erased: 2 } });
});

test.serial('applied batches are purged from the stream; unapplied ones stay', async (t) => {
  const projector = await startProjector(100);
  const batch = await writeBatch([await routedEvent('tenant_trim', 'user_t')]);
  await until(async () => (await jsm.streams.info(ERASURE_INDEX_STREAM)).state.messages === 0, 'trimmed');
  t.is(await rows('tenant_trim'), 1);
  await projector.stop();
  const unapplied = await writeBatch([await routedEvent('tenant_trim', 'user_u')]);
  t.true(await stored(ERASURE_INDEX_STREAM, unapplied.seq));
  t.false(await stored(ERASURE_INDEX_STREAM, batch.seq));
  // Applied by the next projector (and trimmed), nothing lost in between.
  const next = await startProjector(100);
  await until(async () => (await rows('tenant_trim')) === 2 && !(await stored(ERASURE_INDEX_STREAM, unapplied.seq)), 'applied, then trimmed');
  await next.stop();
  t.pass();
});

test.serial('rows past their retention are deleted; newer ones stay', async (t) => {
  const projector = await startProjector();
  await writeBatch([await routedEvent('tenant_old', 'user_o'), await routedEvent('tenant_old', 'user_n')]);
  await until(async () => (await rows('tenant_old')) === 2, 'applied');
  await projector.stop();
  await orm.em.fork().execute("update erasure_index set indexed_at = now() - interval '31 days' where tenant = 'tenant_old' and subject_hash = ?", [hasher.hash({ kind: 'user', id: 'user_o' })]);
  const retention = startErasureIndexRetention({ orm, log });
  t.true(await retention.sweep() >= 1);
  await retention.stop();
  t.is(await rows('tenant_old'), 1);
});
