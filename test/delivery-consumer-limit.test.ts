// More endpoints on one delivery stream than nats-server 2.15's default cap of 1,000 consumers per stream
// (issue 18): the delivery streams set a limit of their own, and streams created before that keep working
// on every supported server (2.10 cannot change the limit of an existing stream, and has no cap).
import test from 'ava';
import { jetstreamManager, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { DELIVERY_MAX_CONSUMERS, deliveryAddress, deliveryStream, endpointConsumer, ensureDeliveryStreams } from '../streams/deliveries.ts';
import { ensureConsumer } from '../streams/ensure.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';

const ENDPOINTS = 1_001;
const conns: NatsConnection[] = [];
const servers: NatsServer[] = [];
test.after.always(async () => {
  for (const c of conns) await c.close().catch(() => {});
  for (const s of servers) await s.dispose();
});

async function manager(): Promise<JetStreamManager> {
  const nats = await startNatsServer();
  servers.push(nats);
  const nc = await connectNats({ url: nats.url });
  conns.push(nc);
  return jetstreamManager(nc);
}

/** One consumer per endpoint on the one delivery stream, as the delivery role creates them; how many exist. */
async function addEndpoints(jsm: JetStreamManager): Promise<number> {
  const ids = Array.from({ length: ENDPOINTS }, (_, i) => `ep_${i}`);
  await Promise.all(Array.from({ length: 16 }, async () => {
    for (let id = ids.pop(); id; id = ids.pop()) {
      await ensureConsumer(jsm, deliveryAddress(id, 1).stream, endpointConsumer(id, { shards: 1, retrySchedule: [1000, 2000], maxQueued: 100 }));
    }
  }));
  return (await jsm.streams.info(deliveryStream(0))).state.consumer_count;
}

test('one delivery stream takes more than 1,000 endpoint consumers', async (t) => {
  const jsm = await manager();
  await ensureDeliveryStreams(jsm, 1, 100);
  t.is((await jsm.streams.info(deliveryStream(0))).config.max_consumers, DELIVERY_MAX_CONSUMERS);
  t.is(await addEndpoints(jsm), ENDPOINTS);
});

test('a delivery stream created without the limit starts, and takes more than 1,000 endpoint consumers', async (t) => {
  const jsm = await manager();
  // As an older hookstream created it: no max_consumers.
  await jsm.streams.add({
    name: deliveryStream(0), subjects: ['deliveries.0.>'], description: 'hookstream delivery shard 0 of 1',
    retention: RetentionPolicy.Workqueue, storage: StorageType.File,
  });
  await ensureDeliveryStreams(jsm, 1, 100);
  const si = await jsm.streams.info(deliveryStream(0));
  // Raised where the server may change it (2.15), unlimited where it may not (2.10, which has no cap).
  t.true(si.config.max_consumers === DELIVERY_MAX_CONSUMERS || si.config.max_consumers <= 0, String(si.config.max_consumers));
  t.is(si.config.max_msgs_per_subject, 100, 'the rest of the definition is applied either way');
  t.is(await addEndpoints(jsm), ENDPOINTS);
});
