// `node bench/erasure.ts [sizes]` (issue 22): the time to erase one user as the streams grow. For each size
// (cumulative; default 100000,1000000 stored events) it fills EVENTS and ERASURE_INDEX with other users'
// events, then gives a fresh user USER_EVENTS events spread evenly over everything stored so far (each
// with an EVENTS message, a queued delivery and an index entry, as the router writes them) and times
// `eraseSubject` for that user. If erasure reads only the user's entries, the time stays flat as the
// stream grows. Its own nats-server and database; nothing else is touched. The router's consumer is made
// again past the end after each fill (so the user's events count as routed, as they would be).
import { headers as natsHeaders } from '@nats-io/nats-core';
import { jetstream, jetstreamManager, AckPolicy, DeliverPolicy } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';
import { startNatsServer } from '../test/helpers/nats-server.ts';
import { createTestDatabase } from '../test/helpers/database.ts';
import { ensureStreams } from '../streams/index.ts';
import { EVENTS_STREAM, ROUTER_CONSUMER } from '../streams/events.ts';
import { ERASURE_INDEX_STREAM, erasureSubject, type ErasureIndexEntry } from '../streams/erasure-index.ts';
import { generateKeys, initSodium } from '../src/crypto/sodium.ts';
import { openDatabase } from '../src/db/orm.ts';
import { createLogger } from '../src/log.ts';
import { createErasure } from '../src/erasure/erase.ts';
import { subjectHasherOf } from '../src/erasure/subject-hash.ts';
import { createDeadLetterOpener } from '../src/admin/opener.ts';
import { deadLetterTaggerOf } from '../src/deadletter/tag.ts';

const sizes = (process.argv[2] ?? '100000,1000000').split(',').map(Number);
const USER_EVENTS = 200;
const TENANT = 'tenant_bench';
const WINDOW = 2000;
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
  let stored = 0;
  let seed = 0;

  /** Publish `n` messages made by `make(i)`, WINDOW in flight; their sequences. */
  async function publishAll(n: number, make: (i: number) => [string, string, ReturnType<typeof natsHeaders>?]): Promise<number[]> {
    const seqs: number[] = new Array(n);
    for (let from = 0; from < n; from += WINDOW) {
      const batch = [];
      for (let i = from; i < Math.min(n, from + WINDOW); i++) {
        const [subject, data, h] = make(i);
        batch.push(js.publish(subject, data, h ? { headers: h } : undefined).then((a) => { seqs[i] = a.seq; }));
      }
      await Promise.all(batch);
    }
    return seqs;
  }

  for (const size of sizes) {
    const fillStart = performance.now();
    const filler = size - stored;
    // Other users' events and their index entries (one user per 20 events, as a busy tenant's).
    const seqs = await publishAll(filler, () => ['events.tenant_other.user.updated', body]);
    const user = { kind: 'user' as const, id: `user_target_${size}` };
    const userSeqs = await publishAll(USER_EVENTS, () => [`events.${TENANT}.user.updated`, JSON.stringify({ userId: user.id })]);
    const deliverySeqs = await publishAll(USER_EVENTS, (i) => ['deliveries.0.webhook_bench', JSON.stringify({ type: 'user.updated', data: { userId: user.id, i } })]);
    // The filler's index entries in USER_EVENTS chunks, one of the user's after each: spread over the new part.
    const chunk = Math.ceil(filler / USER_EVENTS);
    for (let c = 0; c < USER_EVENTS; c++) {
      const from = c * chunk;
      await publishAll(Math.max(0, Math.min(chunk, filler - from)), (i) => [
        erasureSubject(TENANT, hasher.hash({ kind: 'user', id: `user_${seed + Math.floor((from + i) / 20)}` })),
        JSON.stringify({ v: 1, events_seq: seqs[from + i]!, webhook_id: 'msg_x', deliveries: [] } satisfies ErasureIndexEntry)]);
      await publishAll(1, () => [erasureSubject(TENANT, hasher.hash(user)), JSON.stringify({
        v: 1, events_seq: userSeqs[c]!, webhook_id: `msg_${c}`, deliveries: [['DELIVERIES_0', deliverySeqs[c]!, 'webhook_bench']],
      } satisfies ErasureIndexEntry)]);
    }
    seed += filler;
    stored = size;
    // Everything is routed: the router's consumer starts past the end (its ack floor there).
    const last = (await jsm.streams.info(EVENTS_STREAM)).state.last_seq;
    await jsm.consumers.delete(EVENTS_STREAM, ROUTER_CONSUMER);
    await jsm.consumers.add(EVENTS_STREAM, { durable_name: ROUTER_CONSUMER, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: last + 1, filter_subject: 'events.>' });
    const router = await jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER);
    say(`router consumer: ack floor ${router.ack_floor.stream_seq}, delivered ${router.delivered.stream_seq}, pending ${router.num_pending}`);
    const index = (await jsm.streams.info(ERASURE_INDEX_STREAM)).state;
    const events = (await jsm.streams.info(EVENTS_STREAM)).state;
    say(`filled in ${((performance.now() - fillStart) / 1000).toFixed(0)} s: EVENTS ${events.messages} messages (${(events.bytes / 1e6).toFixed(0)} MB), ERASURE_INDEX ${index.messages} (${(index.bytes / 1e6).toFixed(0)} MB)`);
    // The lookup alone: the user's entries, one direct get each (what erasure does before deleting).
    const r0 = performance.now();
    let found = 0;
    for (let seq = 1; ;) {
      const m = await jsm.streams.getMessage(ERASURE_INDEX_STREAM, { next_by_subj: erasureSubject(TENANT, hasher.hash(user)), seq } as never).catch(() => null);
      if (!m) break;
      found++;
      seq = m.seq + 1;
    }
    const readMs = performance.now() - r0;
    const t0 = performance.now();
    const out = await erasure.eraseSubject(TENANT, user, { routingWaitMs: 0 });
    const ms = performance.now() - t0;
    const t1 = performance.now();
    const again = await erasure.eraseSubject(TENANT, user, { routingWaitMs: 0 });
    const msAgain = performance.now() - t1;
    say(`read the user's ${found} index entries: ${readMs.toFixed(0)} ms`);
    say(`erase one user with ${USER_EVENTS} events among ${events.messages} events / ${index.messages} index entries: ${ms.toFixed(0)} ms ` +
      `(${(ms / USER_EVENTS).toFixed(2)} ms per event; ${JSON.stringify(out.stores)}); ` +
      `again (nothing left): ${msAgain.toFixed(0)} ms, ${again.stores.index.entries} entries`);
  }
} finally {
  await orm.close(true);
  await nc.close();
  await nats.dispose();
  await db.drop();
}
