// `node bench/erasure.ts [sizes]` (issue 22): the time to erase one user as the stores grow. For each size
// (cumulative; default 100000,1000000 stored events) it fills EVENTS with other users' events and the
// erasure index (Postgres rows, as the projection writes them) with their entries, then gives a fresh user
// USER_EVENTS events spread evenly over everything stored so far (each with an EVENTS message, a queued
// delivery and an index row, as router and projection write them) and times `eraseSubject` for that user.
// The fill goes to the stores directly, not through the service: routing a million events took minutes,
// and what erasure reads is the same (its own nats-server and database; nothing else is touched). The
// router's consumer is made again past the end after each fill (so every event counts as routed).
import { jetstream, jetstreamManager, AckPolicy, DeliverPolicy } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { startNatsServer } from '../test/helpers/nats-server.ts';
import { createTestDatabase } from '../test/helpers/database.ts';
import { ensureStreams } from '../streams/index.ts';
import { EVENTS_STREAM, ROUTER_CONSUMER } from '../streams/events.ts';
import { generateKeys, initSodium } from '../src/crypto/sodium.ts';
import { openDatabase } from '../src/db/orm.ts';
import { createLogger } from '../src/log.ts';
import { createErasure } from '../src/erasure/erase.ts';
import { insertIndexRows, subjectIndexRows } from '../src/erasure/index-store.ts';
import { subjectHasherOf } from '../src/erasure/subject-hash.ts';
import { createDeadLetterOpener } from '../src/admin/opener.ts';
import { deadLetterTaggerOf } from '../src/deadletter/tag.ts';

const sizes = (process.argv[2] ?? '100000,1000000').split(',').map(Number);
const USER_EVENTS = 200;
const TENANT = 'tenant_bench';
const say = (s: string) => process.stderr.write(`${s}\n`);

await initSodium();
const nats = await startNatsServer();
const db = await createTestDatabase('bench_erasure');
const log = createLogger({ level: 'error' });
const nc = await connect({ servers: nats.url });
const js = jetstream(nc);
const jsm = await jetstreamManager(nc);
const keys = generateKeys();
const hasher = subjectHasherOf(keys.masterKey);
const orm = await openDatabase(db.url, log);
try {
  await ensureStreams(jsm, { shards: 1, maxQueued: 10_000_000, retrySchedule: [1000], replicas: 1 });
  const opener = await createDeadLetterOpener(deadLetterTaggerOf(keys.masterKey), keys.deadLetterSecretKey);
  const erasure = createErasure({ jsm, orm, hasher, opener, log });
  const body = JSON.stringify({ userId: 'user_other', email: 'someone@example.com', name: 'Some One', plan: 'pro' });
  const em = orm.em.fork();
  let stored = 0;

  /** `n` other users' events in EVENTS (plain publishes, flushed every 10,000), with `user`'s events spread among them. */
  async function fillEvents(n: number, user: string): Promise<number[]> {
    const before = (await jsm.streams.info(EVENTS_STREAM)).state.messages;
    const mine: number[] = [];
    const every = Math.max(1, Math.floor(n / USER_EVENTS));
    for (let i = 0; i < n; i++) {
      nc.publish('events.tenant_other.user.updated', body);
      if (i % 10_000 === 9_999) await nc.flush();
      if (i % every === every - 1 && mine.length < USER_EVENTS) mine.push((await js.publish(`events.${TENANT}.user.updated`, JSON.stringify({ userId: user }))).seq);
    }
    while (mine.length < USER_EVENTS) mine.push((await js.publish(`events.${TENANT}.user.updated`, JSON.stringify({ userId: user }))).seq);
    await nc.flush();
    for (;;) {
      const now = (await jsm.streams.info(EVENTS_STREAM)).state.messages;
      if (now >= before + n + USER_EVENTS) return mine;
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  for (const size of sizes) {
    const fillStart = performance.now();
    const filler = size - stored;
    const first = (await jsm.streams.info(EVENTS_STREAM)).state.last_seq + 1;
    const user = { kind: 'user' as const, id: `user_target_${size}` };
    const userSeqs = await fillEvents(filler, user.id);
    // Their index rows, one user per 20 events (a busy tenant's), as the projection writes them: in SQL, for speed.
    await em.execute(`insert into erasure_index (tenant, subject_hash, events_seq, webhook_id, deliveries, indexed_at)
      select ?, substr(md5('other' || (i / 20)::text), 1, 32), i, 'msg_x', '[]'::jsonb, now() from generate_series(?::bigint, ?::bigint) i where i <> all(?::bigint[])`,
    [TENANT, first, first + filler + USER_EVENTS - 1, `{${userSeqs.join(',')}}`]);
    // The user's deliveries (queued for an endpoint) and rows.
    const mine = [];
    for (let c = 0; c < USER_EVENTS; c++) {
      const d = await js.publish('deliveries.0.webhook_bench', JSON.stringify({ type: 'user.updated', data: { userId: user.id, c } }));
      mine.push({ tenant: TENANT, hashes: [hasher.hash(user)], events_seq: userSeqs[c]!, webhook_id: `msg_${c}`, deliveries: [['DELIVERIES_0', d.seq, 'webhook_bench']] as [string, number, string][] });
    }
    await insertIndexRows(em, mine);
    await em.execute('analyze erasure_index');
    stored = size;
    // Everything is routed: the router's consumer starts past the end (its ack floor there).
    const last = (await jsm.streams.info(EVENTS_STREAM)).state.last_seq;
    await jsm.consumers.delete(EVENTS_STREAM, ROUTER_CONSUMER);
    await jsm.consumers.add(EVENTS_STREAM, { durable_name: ROUTER_CONSUMER, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: last + 1, filter_subject: 'events.>' });
    const events = (await jsm.streams.info(EVENTS_STREAM)).state;
    const rows = await em.execute<{ n: string; bytes: string }[]>("select count(*) as n, pg_total_relation_size('erasure_index') as bytes from erasure_index");
    say(`filled in ${((performance.now() - fillStart) / 1000).toFixed(0)} s: EVENTS ${events.messages} messages (${(events.bytes / 1e6).toFixed(0)} MB), erasure_index ${rows[0]!.n} rows (${(Number(rows[0]!.bytes) / 1e6).toFixed(0)} MB with its indexes)`);
    // The lookup alone: the user's rows (what erasure reads before deleting).
    const r0 = performance.now();
    const found = await subjectIndexRows(orm.em.fork(), TENANT, hasher.all(user), Number.MAX_SAFE_INTEGER);
    const readMs = performance.now() - r0;
    const t0 = performance.now();
    const out = await erasure.eraseSubject(TENANT, user, { routingWaitMs: 0, projectionWaitMs: 0 });
    const ms = performance.now() - t0;
    const t1 = performance.now();
    const again = await erasure.eraseSubject(TENANT, user, { routingWaitMs: 0, projectionWaitMs: 0 });
    const msAgain = performance.now() - t1;
    say(`read the user's ${found.length} index rows: ${readMs.toFixed(1)} ms`);
    say(`erase one user with ${USER_EVENTS} events among ${events.messages} events / ${rows[0]!.n} index rows: ${ms.toFixed(0)} ms ` +
      `(${(ms / USER_EVENTS).toFixed(2)} ms per event; ${JSON.stringify(out.stores)}); ` +
      `again (nothing left): ${msAgain.toFixed(0)} ms, ${again.stores.index.entries} entries`);
  }
} finally {
  await orm.close(true);
  await nc.close();
  await nats.dispose();
  await db.drop();
}
