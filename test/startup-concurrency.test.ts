// Start-up that any number of processes run at once: every one of them succeeds on an empty server,
// replica counts the server cannot give and shard-count mismatches stop start-up with one clear line.
import test from 'ava';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { ensureStreams, startupJetStreamManager } from '../streams/index.ts';
import { ensureConsumer } from '../streams/ensure.ts';
import { deliveryAddress, deliveryStream, endpointConsumer } from '../streams/deliveries.ts';
import { isHookstreamError, UnreachableError } from '../src/errors.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import { directDeliveryDefaults } from './helpers/direct-env.ts';

const conns: NatsConnection[] = [];
const servers: NatsServer[] = [];
test.after.always(async () => {
  for (const c of conns) await c.close().catch(() => {});
  for (const s of servers) await s.dispose();
});

async function managers(url: string, n: number): Promise<JetStreamManager[]> {
  return Promise.all(Array.from({ length: n }, async () => {
    const nc = await connectNats({ url });
    conns.push(nc);
    return jetstreamManager(nc);
  }));
}

const opts = { shards: 8, retrySchedule: [1000, 2000], maxQueued: 100_000, replicas: 1 };

test('four processes ensuring every stream at the same moment all succeed, and again', async (t) => {
  const nats = await startNatsServer();
  servers.push(nats);
  const jsms = await managers(nats.url, 4);
  for (let round = 0; round < 3; round++) {
    const results = await Promise.allSettled(jsms.map((jsm) => ensureStreams(jsm, opts)));
    t.deepEqual(results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason)), [], `round ${round}`);
  }
  const names: string[] = [];
  for await (const n of jsms[0]!.streams.names()) names.push(n);
  t.is(names.filter((n) => n.startsWith('DELIVERIES_')).length, 8);
  // The same endpoint consumer created by four delivery roles at once.
  const def = endpointConsumer('webhook_race', { shards: 8, retrySchedule: [1000, 2000], maxQueued: 100_000, replicas: 1 });
  const results = await Promise.allSettled(jsms.map((jsm) => ensureConsumer(jsm, deliveryAddress('webhook_race', 8).stream, def)));
  t.deepEqual(results.filter((r) => r.status === "rejected").map((r) => String((r as PromiseRejectedResult).reason)), []);
});

test('another shard count than the streams were created with is one line naming the value to use, even mid-creation', async (t) => {
  const nats = await startNatsServer();
  servers.push(nats);
  const [jsm] = await managers(nats.url, 1);
  await ensureStreams(jsm!, opts);
  const e = await t.throwsAsync(ensureStreams(jsm!, { ...opts, shards: 4 }));
  t.true(isHookstreamError(e));
  t.regex(e!.message, /HOOKSTREAM_DELIVERY_SHARDS: is 4 but .* created with 8/);
  const more = await t.throwsAsync(ensureStreams(jsm!, { ...opts, shards: 16 }));
  t.regex(more!.message, /created with 8/);
  // A set still being created (only some shards exist) is no mismatch for a process with the same count.
  await jsm!.streams.delete(deliveryStream(5));
  await t.notThrowsAsync(ensureStreams(jsm!, opts));
});

test('replicas a single server cannot give: one line saying what to do', async (t) => {
  const nats = await startNatsServer();
  servers.push(nats);
  const [jsm] = await managers(nats.url, 1);
  const e = await t.throwsAsync(ensureStreams(jsm!, { ...opts, replicas: 3 }));
  t.true(isHookstreamError(e));
  t.regex(e!.message, /^HOOKSTREAM_REPLICAS: is 3 but NATS is a single server/);
  t.false(e!.message.includes('\n'));
});

test('three whole services starting at once on an empty server and database all start', async (t) => {
  const { loadConfig } = await import('../src/config.ts');
  const { createLogger } = await import('../src/log.ts');
  const { startService } = await import('../src/service.ts');
  const { generateKeys, initSodium } = await import('../src/crypto/sodium.ts');
  const { createTestDatabase } = await import('./helpers/database.ts');
  await initSodium();
  const nats = await startNatsServer();
  servers.push(nats);
  const db = await createTestDatabase('startup_race');
  const keys = generateKeys();
  // With TEST_DIRECT_DELIVERY=1 the three also write direct delivery's start into EVENTS' metadata at once.
  const config = loadConfig({
    ...directDeliveryDefaults(),
    NATS_URL: nats.url, DATABASE_URL: db.url, PORT: '0', HOOKSTREAM_DELIVERY_SHARDS: '4', HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1',
    HOOKSTREAM_MASTER_KEY: keys.masterKey, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: keys.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: keys.deadLetterSecretKey, HOOKSTREAM_LOG_LEVEL: 'error', OPS_PORT: '0', CONSOLE_PORT: '0',
  });
  const log = createLogger({ level: 'error' });
  const results = await Promise.allSettled([0, 1, 2].map(() => startService(config, log)));
  for (const r of results) if (r.status === 'fulfilled') await r.value.stop();
  await db.drop();
  t.deepEqual(results.filter((r) => r.status === 'rejected').map((r) => String((r as PromiseRejectedResult).reason)), []);
});

test('a server without JetStream stops start-up at once with what to do', async (t) => {
  const nats = await startNatsServer({ jetstream: false });
  servers.push(nats);
  const nc = await connectNats({ url: nats.url });
  conns.push(nc);
  const error = await t.throwsAsync(startupJetStreamManager(nc), { instanceOf: UnreachableError });
  t.regex(error!.message, /start it with -js/);
});
