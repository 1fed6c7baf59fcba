// Issue 17: an event delivered to the router again (its ack lost with a killed instance or a NATS restart,
// or retried after NATS trouble) republishes only what its earlier routing did not store, whatever
// DELIVERIES' duplicate window still remembers, and is never rejected once its fan-out is stored. An earlier
// instance is played by the test: it takes the event off the router's consumer, writes what it "stored"
// to ROUTED (streams/routed.ts) and hands the event back with a nak. Real nats-server and Postgres.
import test from 'ava';
import { startHarness, eventually, type Harness } from './helpers/service.ts';
import { startReceiver, type Receiver } from './helpers/receiver.ts';
import { startRouter, type Router } from '../src/router/router.ts';
import { startEndpointDirectory, type EndpointDirectory } from '../src/endpoints/directory.ts';
import { createAckedPublisher, type AckedPublisher } from '../src/nats/acked-publisher.ts';
import { createServiceMetrics } from '../src/metrics.ts';
import { createWebhookIdCodec, deriveWebhookIdKey } from '../src/domain/webhook-id.ts';
import { MAX_EVENT_DEPTH } from '../src/domain/event-data.ts';
import { EVENTS_STREAM, ROUTER_CONSUMER } from '../streams/events.ts';
import { REJECTED_STREAM } from '../streams/rejected.ts';
import { routedSubject, type RoutedMarker } from '../streams/routed.ts';
import type { JsMsg } from '@nats-io/jetstream';
import type { TenantId } from '../src/domain/ids.ts';

let h: Harness;
let publisher: AckedPublisher;
let directory: EndpointDirectory;
let router: Router | undefined;
const receivers: Receiver[] = [];

test.before(async () => {
  // Every role but the router: the test is the earlier instance, then starts the router itself.
  // The router's fan-out into work queues itself: pinned to the default path.
  h = await startHarness('router_retry', { HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_EVENT_PARTITIONS: '0', HOOKSTREAM_ROLES: 'delivery,deadletter,projector' });
  publisher = createAckedPublisher(h.service.nc, { timeoutMs: 5000 });
  directory = await startEndpointDirectory({ js: h.service.js, jsm: h.service.jsm, log: h.log });
});
test.after.always(async () => {
  await router?.stop();
  await directory?.stop();
  publisher?.close();
  await Promise.all(receivers.map((r) => r.close()));
  await h?.close();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

test.serial('a redelivered event publishes only what its earlier routing did not store, and one stored whole is acked', async (t) => {
  const tenant = 'tenant_router_retry' as TenantId;
  const [ra, rb] = [await startReceiver(), await startReceiver()];
  receivers.push(ra, rb);
  const { endpoint: a } = await h.store.create(tenant, { url: ra.url, events: ['user.*'] });
  await h.store.create(tenant, { url: rb.url, events: ['user.*'] });
  const versionOfA = await eventually(() => h.service.directory!.get(a.id)?.version, 5000, 'endpoint A in the directory');
  await directory.sync();

  // The earlier instance: took both events, stored A's delivery of the first and the whole fan-out of the
  // second, wrote that down, and lost its acks.
  const taken: JsMsg[] = [];
  const consumer = await h.service.js.consumers.get(EVENTS_STREAM, ROUTER_CONSUMER);
  for (const userId of ['user_partly', 'user_whole']) {
    await h.service.js.publish(`events.${tenant}.user.created`, JSON.stringify({ userId }));
    const m = await consumer.next({ expires: 5000 });
    if (!m) return t.fail('the event was not delivered to the router consumer');
    taken.push(m);
  }
  const [partly, whole] = taken as [JsMsg, JsMsg];
  const write = (seq: number, marker: RoutedMarker) => h.service.js.publish(routedSubject(seq), JSON.stringify(marker));
  await write(partly.seq, { v: 1, partial: { [partly.seq]: [`${a.id}@${versionOfA}`] } });
  await write(whole.seq, { v: 1, done: [[whole.seq, whole.seq]] });

  router = await startRouter({
    nc: h.service.nc, js: h.service.js, jsm: h.service.jsm, publisher, directory, shards: h.config.deliveryShards, log: h.log,
    metrics: createServiceMetrics(),
    webhookIds: createWebhookIdCodec(deriveWebhookIdKey(Buffer.from(h.keys.masterKey, 'base64'))),
    limits: { maxBytes: h.config.maxEventBytes, maxDepth: MAX_EVENT_DEPTH },
  });
  partly.nak();
  whole.nak();

  const [got] = await rb.waitFor(1, 10_000);
  t.is((JSON.parse(got!.body) as { data: { userId: string } }).data.userId, 'user_partly', 'B gets what was missing');
  await eventually(async () => {
    const info = await h.service.jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER);
    return info.num_ack_pending === 0 && info.num_pending === 0 ? true : undefined;
  }, 10_000, 'both events acked');
  await sleep(500); // room for a publish that should not happen to arrive
  t.is(ra.received.length, 0, 'A already had its delivery of the first; nothing of the second was published');
  t.is(rb.received.length, 1, 'B: the first only');
  t.is((await h.service.jsm.streams.info(REJECTED_STREAM)).state.messages, 0, 'neither event was rejected');
});
