// Issue 21: the router marks the deliveries that may be stored after a later event's (src/router/late-marks.ts):
// a marker is stored in the delivery stream after each of them, and nothing else is marked.
import test from 'ava';
import { DiscardPolicy, jetstream, jetstreamManager, RetentionPolicy, type JetStreamManager } from '@nats-io/jetstream';
import type { ExecutionContext } from 'ava';
import { connectNats } from '../src/nats/connect.ts';
import { createAckedPublisher } from '../src/nats/acked-publisher.ts';
import { createLateMarks } from '../src/router/late-marks.ts';
import { silentLogger } from '../src/log.ts';
import { lateMarkSubject } from '../streams/deliveries.ts';
import { startNatsServer } from './helpers/nats-server.ts';

const STREAM = 'DELIVERIES_0';
const MARKS = lateMarkSubject(STREAM);
const lastOn = async (jsm: JetStreamManager) => (await jsm.streams.getMessage(STREAM, { last_by_subj: MARKS }).catch(() => null))?.seq ?? 0;

async function setUp(t: ExecutionContext, maxQueued = 100_000) {
  const server = await startNatsServer();
  t.teardown(() => server.dispose());
  const nc = await connectNats({ url: server.url });
  t.teardown(() => nc.close());
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: STREAM, subjects: ['deliveries.0.>'], retention: RetentionPolicy.Workqueue, max_msgs_per_subject: maxQueued, discard_new_per_subject: true, discard: DiscardPolicy.New });
  const publisher = createAckedPublisher(nc, { timeoutMs: 5000 });
  t.teardown(() => publisher.close());
  const marks = createLateMarks({ publisher, jsm, maxQueued, log: silentLogger });
  t.teardown(() => marks.close());
  /** A delivery of `event` stored and told to the marks, as the router does; the marker's wait, if any. */
  const store = async (event: number, late = false) => {
    const at = await publisher.publish('deliveries.0.webhook_a.k.key', String(event));
    return { seq: at.seq, marked: marks.stored(at, event, late) };
  };
  const markers = async () => {
    const info = await jsm.streams.info(STREAM, { subjects_filter: MARKS });
    return info.state.subjects?.[MARKS] ?? 0;
  };
  const lastMarker = () => lastOn(jsm);
  return { nc, jsm, marks, store, markers, lastMarker };
}

test('the first store is marked; a run in event order is not; a gap, an earlier event or a catch-up starts a marked one', async (t) => {
  const { nc, store, markers, lastMarker } = await setUp(t);
  const first = await store(1);
  t.truthy(first.marked, 'nothing known before this process\'s first store');
  await first.marked;
  t.true(await lastMarker() > first.seq, 'the marker is stored after the delivery');
  t.is(await markers(), 1);

  // The marker is this process's own store: the run goes on after it.
  for (const event of [2, 3, 3, 7]) t.is((await store(event)).marked, undefined, `event ${event} in order`);
  t.is(await markers(), 1);

  // Another publisher (another router, a replay) stores in between: the next store may be after a later event's.
  await jetstream(nc).publish('deliveries.0.webhook_b', 'foreign');
  const afterGap = await store(8);
  t.truthy(afterGap.marked);
  await afterGap.marked;
  t.true(await lastMarker() > afterGap.seq);

  const retried = await store(5);
  t.truthy(retried.marked, 'an event lower than the run\'s (a retried fan-out)');
  await retried.marked;
  t.true(await lastMarker() > retried.seq);
  t.is((await store(6)).marked, undefined, 'the new run goes on from it');

  const caughtUp = await store(9, true);
  t.truthy(caughtUp.marked, 'a catch-up is late by nature');
  await caughtUp.marked;
  t.is(await markers(), 4);
});

test('marks asked for before the marker is sent share it', async (t) => {
  const { store, markers, marks } = await setUp(t);
  await (await store(1)).marked;
  const a = marks.mark(STREAM);
  const b = marks.mark(STREAM);
  t.is(a, b);
  await Promise.all([a, b]);
  t.is(await markers(), 2);
});

test('old markers are purged, the last kept, and a small queue bound never refuses a marker', async (t) => {
  const { marks, markers, lastMarker } = await setUp(t, 3);
  let last = 0;
  for (let i = 0; i < 7; i++) {
    await marks.mark(STREAM);
    const seq = await lastMarker();
    t.true(seq > last, `marker ${i} stored`);
    last = seq;
    t.true(await markers() <= 3);
  }
});

test('a bound of one: each marker replaces the last', async (t) => {
  const { marks, markers, lastMarker } = await setUp(t, 1);
  for (let i = 0; i < 3; i++) await marks.mark(STREAM);
  t.is(await markers(), 1);
  t.true(await lastMarker() > 0);
});
