// Issue 22: a queued delivery has a bounded life (HOOKSTREAM_QUEUE_RETENTION, 3 s here), even one held for
// a disabled endpoint: NATS removes it unsent, and a restore afterwards sends only what came after. The
// setting reaches streams that already exist at the next start. Real NATS, Postgres and HTTP receiver.
import test from 'ava';
import { nanos } from '@nats-io/nats-core';
import { eventually, queuedDeliveries } from './helpers/service.ts';
import { startTestService, tenantClient, type TestService } from './helpers/fixture.ts';
import { deliveryAddress, deliveryStream, endpointBacklog } from '../streams/deliveries.ts';
import { ensureStreams } from '../streams/index.ts';
import type { EndpointId } from '../src/domain/ids.ts';

const RETENTION_MS = 3000;
let h: TestService;

test.before(async () => {
  // The retention must outlast the retry schedule with its attempts: 200 ms + 2 attempts of 1 s.
  h = await startTestService('queue_retention', {
    // The delivery streams' retention and a held delivery in a work queue: pinned to the default path.
    HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_EVENT_PARTITIONS: '0',
    HOOKSTREAM_QUEUE_RETENTION: `${RETENTION_MS}ms`, HOOKSTREAM_RETRY_SCHEDULE: '200ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '1s',
  });
});
test.after.always(async () => {
  await h?.closeAll();
});

const queued = (endpoint: EndpointId) => queuedDeliveries(h, endpoint);

test.serial('a delivery held for a disabled endpoint expires after HOOKSTREAM_QUEUE_RETENTION and is not sent after a restore', async (t) => {
  const r = await h.receiver(() => 410);
  const c = await tenantClient(h, t, 'tenant_expiry');
  const { body: ep } = await c.post('/v1/webhooks', { url: r.url, events: ['user.*'] });
  const { stream } = deliveryAddress(ep.id, h.config.deliveryShards);
  t.is((await h.service.jsm.streams.info(stream)).config.max_age, nanos(RETENTION_MS));

  await h.publish('tenant_expiry', 'user.created', { userId: 'user_1' });
  await r.waitFor(1);
  await eventually(async () => ((await c.get(`/v1/webhooks/${ep.id}`)).body.status === 'disabled' ? true : undefined), 10_000, 'the endpoint disabled');
  await h.publish('tenant_expiry', 'user.updated', { userId: 'user_1' });
  t.true((await eventually(async () => ((await queued(ep.id)) > 0 ? true : undefined), 10_000, 'a held delivery')));

  await eventually(async () => ((await queued(ep.id)) === 0 ? true : undefined), 20_000, 'the held deliveries expired');

  r.respond = () => 204;
  t.is((await c.post(`/v1/webhooks/${ep.id}/restore`)).status, 200);
  await h.publish('tenant_expiry', 'user.deleted', { userId: 'user_1' });
  await r.waitFor(2);
  // Nothing left to send: the expired deliveries are gone, not merely late.
  await eventually(async () => {
    const backlog = await endpointBacklog(h.service.jsm, ep.id, h.config.deliveryShards);
    return backlog?.pending === 0 && backlog.ack_pending === 0 && (await queued(ep.id)) === 0 ? true : undefined;
  }, 15_000, 'the endpoint has nothing left to send');
  t.deepEqual(r.received.slice(1).map((x) => JSON.parse(x.body).type), ['user.deleted']);
});

test.serial('a changed HOOKSTREAM_QUEUE_RETENTION is applied to the delivery streams that exist', async (t) => {
  const { deliveryShards: shards, maxQueuedPerEndpoint: maxQueued, retrySchedule } = h.config;
  const maxAges = async () => Promise.all(Array.from({ length: shards }, async (_, n) => (await h.service.jsm.streams.info(deliveryStream(n))).config.max_age));
  t.deepEqual(new Set(await maxAges()), new Set([nanos(RETENTION_MS)]));
  await ensureStreams(h.service.jsm, { shards, maxQueued, retrySchedule, replicas: 1, queueRetentionMs: 60_000 });
  t.deepEqual(new Set(await maxAges()), new Set([nanos(60_000)]));
});
