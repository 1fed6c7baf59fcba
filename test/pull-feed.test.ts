// The delivery role's pull feeds (src/nats/pull-feed.ts), hand-rolled pull requests against a real
// nats-server: never more messages in the process than the owner has lanes for, and pulling that resumes by
// itself after each way the server can lose a pull (expiry, a deleted consumer, a server restart).
import test from 'ava';
import { AckPolicy, DeliverPolicy, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { BRIEF_PULL_MS, createPullFeeds } from '../src/nats/pull-feed.ts';
import type { PulledMsg } from '../src/nats/pulled-msg.ts';
import { silentLogger } from '../src/log.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import { eventually } from './helpers/service.ts';

let nats: NatsServer;
let nc: NatsConnection;
let jsm: JetStreamManager;

test.before(async () => {
  nats = await startNatsServer();
  nc = await connectNats({ url: nats.url });
  jsm = await jetstreamManager(nc);
});

test.after.always(async () => {
  await nc?.close();
  await nats?.dispose();
});

/** A stream of its own per test (they run at once), with one explicit-ack consumer `c`. */
async function streamWithConsumer(name: string): Promise<void> {
  await jsm.streams.add({ name, subjects: [`${name.toLowerCase()}.>`] });
  await jsm.consumers.add(name, { durable_name: 'c', ack_policy: AckPolicy.Explicit, ack_wait: 30e9 });
}

async function publish(name: string, n: number): Promise<void> {
  const js = jsm.jetstream();
  for (let i = 0; i < n; i++) await js.publish(`${name.toLowerCase()}.x`, String(i));
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test('a feed holds no more messages than its owner has free lanes, and pulls again as lanes free up', async (t) => {
  await streamWithConsumer('LANES');
  await publish('LANES', 40);
  const feeds = createPullFeeds(nc, { expiresMs: 30_000, heartbeatMs: 5_000, inboxPrefix: '_INBOX', log: silentLogger });
  t.teardown(() => feeds.stop());
  const lanes = 4;
  const held: PulledMsg[] = [];
  let received = 0;
  const feed = feeds.open({ stream: 'LANES', consumer: 'c', capacity: () => lanes - held.length, onMessage: (m) => { held.push(m); received++; } });

  await eventually(() => (received >= lanes ? true : undefined), 10_000, 'the first lanes filled');
  // With 36 more waiting, a feed that over-pulled would have them here by now.
  await sleep(500);
  t.is(received, lanes);

  // Three lanes free: below a quarter of the lanes (1) a pull waits for none; three are pulled at once.
  for (const m of held.splice(0, 3)) m.ack();
  feed.fill();
  await eventually(() => (received >= lanes + 3 ? true : undefined), 10_000, 'the freed lanes filled');
  await sleep(500);
  t.is(received, lanes + 3);
  t.is(held.length, lanes);
  t.deepEqual(held.map((m) => m.info.streamSequence), [4, 5, 6, 7]);
});

test('a brief feed asks for more than one message with a 5 s pull and no heartbeats; for one, with the long poll', async (t) => {
  await streamWithConsumer('BRIEF');
  // The pull requests as the server gets them.
  const asked: { batch: number; expires: number; idle_heartbeat?: number }[] = [];
  const spy = nc.subscribe('$JS.API.CONSUMER.MSG.NEXT.BRIEF.c', { callback: (_e, m) => { asked.push(m.json()); } });
  t.teardown(() => spy.unsubscribe());
  await nc.flush();
  const feeds = createPullFeeds(nc, { expiresMs: 30_000, heartbeatMs: 5_000, inboxPrefix: '_INBOX', log: silentLogger });
  t.teardown(() => feeds.stop());
  let lanes = 1;
  const got: PulledMsg[] = [];
  const feed = feeds.open({ stream: 'BRIEF', consumer: 'c', capacity: () => lanes - got.length, brief: () => true, onMessage: (m) => got.push(m) });
  await eventually(() => (asked.length >= 1 ? true : undefined), 5000, 'the first pull');
  lanes = 6;
  feed.fill();
  await eventually(() => (asked.length >= 2 ? true : undefined), 5000, 'the second pull');
  t.deepEqual(asked[0], { batch: 1, expires: 30_000e6, idle_heartbeat: 5_000e6 });
  t.deepEqual(asked[1], { batch: 5, expires: BRIEF_PULL_MS * 1e6 });
  t.is(feed.requested(), 6);
  // Ended by the server after its 5 s with nothing sent: what it asked for is asked for again, briefly.
  const before = Date.now();
  await eventually(() => (asked.length >= 3 ? true : undefined), BRIEF_PULL_MS + 5000, 'the brief pull to end and be asked again');
  t.true(Date.now() - before > BRIEF_PULL_MS - 1500);
  t.deepEqual(asked[2], { batch: 5, expires: BRIEF_PULL_MS * 1e6 });
  await publish('BRIEF', 3);
  await eventually(() => (got.length === 3 ? true : undefined), 5000, 'the messages');
});

test('pulls that expire with nothing to send are asked for again, so a message published much later arrives', async (t) => {
  await streamWithConsumer('EXPIRES');
  // Pulls expire every 200 ms: 8 of them end before anything is published.
  const feeds = createPullFeeds(nc, { expiresMs: 200, heartbeatMs: 100, inboxPrefix: '_INBOX', log: silentLogger });
  t.teardown(() => feeds.stop());
  const got: PulledMsg[] = [];
  feeds.open({ stream: 'EXPIRES', consumer: 'c', capacity: () => 8 - got.length, onMessage: (m) => got.push(m) });
  await sleep(1600);
  t.is(got.length, 0);
  await publish('EXPIRES', 3);
  await eventually(() => (got.length === 3 ? true : undefined), 10_000, 'three messages after the expiries');
  t.deepEqual(got.map((m) => m.info.streamSequence), [1, 2, 3]);
});

test('a consumer deleted under a feed and created again: the feed pulls from the new one by itself', async (t) => {
  await streamWithConsumer('RECREATED');
  const feeds = createPullFeeds(nc, { expiresMs: 30_000, heartbeatMs: 5_000, inboxPrefix: '_INBOX', log: silentLogger });
  t.teardown(() => feeds.stop());
  const got: PulledMsg[] = [];
  feeds.open({ stream: 'RECREATED', consumer: 'c', capacity: () => 8, onMessage: (m) => { got.push(m); m.ack(); } });
  await publish('RECREATED', 1);
  await eventually(() => (got.length === 1 ? true : undefined), 10_000, 'the first message');

  // The server answers the waiting pull 409 (consumer deleted); the feed backs off and pulls again.
  await jsm.consumers.delete('RECREATED', 'c');
  await sleep(300);
  await jsm.consumers.add('RECREATED', { durable_name: 'c', ack_policy: AckPolicy.Explicit, ack_wait: 30e9, deliver_policy: DeliverPolicy.New });
  await publish('RECREATED', 2);
  await eventually(() => (got.length === 3 ? true : undefined), 10_000, 'the messages for the new consumer');
  t.deepEqual(got.map((m) => m.info.streamSequence), [1, 2, 3]);
});

test.serial('a nats-server killed and started again loses the waiting pulls without a word; the feed pulls again once reconnected', async (t) => {
  await streamWithConsumer('RESTART');
  // Heartbeats every 30 s: the missed-heartbeat sweep would pull again only after 60 s; within the 20 s
  // waited below, only the reconnect can bring the pull back.
  const feeds = createPullFeeds(nc, { expiresMs: 120_000, heartbeatMs: 30_000, inboxPrefix: '_INBOX', log: silentLogger });
  t.teardown(() => feeds.stop());
  const got: PulledMsg[] = [];
  feeds.open({ stream: 'RESTART', consumer: 'c', capacity: () => 8, onMessage: (m) => { got.push(m); m.ack(); } });
  await publish('RESTART', 1);
  await eventually(() => (got.length === 1 ? true : undefined), 10_000, 'the first message');

  // SIGKILL: no 409 reaches the feed (a graceful stop sends one, and the feed's back-off pulls again).
  await nats.stop('SIGKILL');
  await nats.start();
  await eventually(async () => (nc.isClosed() ? undefined : await jsm.streams.info('RESTART').then(() => true, () => undefined)), 30_000, 'the stream after the restart');
  const started = performance.now();
  await publish('RESTART', 1);
  await eventually(() => (got.some((m) => m.info.streamSequence === 2) ? true : undefined), 20_000, 'the message after the restart');
  t.log(`arrived ${Math.round(performance.now() - started)} ms after its publish`);
  // The kill can lose the first message's ack with the consumer's state (nats-server writes it at most
  // every 100 ms): then the first comes again, before the second (seen in CI). Nothing else may come.
  const seqs = got.map((m) => m.info.streamSequence);
  t.true(seqs.join() === '1,2' || seqs.join() === '1,1,2', seqs.join());
});
