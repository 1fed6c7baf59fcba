// NATS restarted or frozen in the first seconds of `hookstream serve` (before it connects, while it creates its
// streams, while its roles start): the process waits and retries, never exits, and delivers every event without
// a restart by anyone. Then SIGTERM stops it with exit 0.
// Not under TEST_DIRECT_DELIVERY: it makes the streams without partitions before the service starts (the fault harness's shape).
import test from 'ava';
import type { NatsConnection } from '@nats-io/nats-core';
import { jetstreamManager } from '@nats-io/jetstream';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import { createTestDatabase, type TestDatabase } from './helpers/database.ts';
import { eventually } from './helpers/service.ts';
import {
  generateKeys, initSodium, instanceEnv, produce, serviceConnection, startServe, subscribeEndpoints, type Endpoints, type Served,
} from './faults/harness.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { ensureStreams } from '../streams/index.ts';
import { loadConfig } from '../src/config.ts';

const EVENTS = 200;
const ENDPOINTS = 2;

let nats: NatsServer;
let db: TestDatabase;
let keys: ReturnType<typeof generateKeys>;
const served: Served[] = [];

test.before(async () => {
  await initSodium();
  nats = await startNatsServer();
  db = await createTestDatabase('startup_nats_restart');
  keys = generateKeys();
  // The streams as the service makes them, so the endpoints and events can be stored before it starts.
  const config = loadConfig(instanceEnv({ natsUrl: nats.url, databaseUrl: db.url, keys }));
  const nc = await serviceConnection(nats.url);
  await ensureStreams(await jetstreamManager(nc), {
    shards: config.deliveryShards, maxQueued: config.maxQueuedPerEndpoint, retrySchedule: config.retrySchedule, replicas: 1,
    queueRetentionMs: config.queueRetentionMs,
  });
  await nc.close();
});

test.after.always(async () => {
  for (const s of served) await s.kill('SIGKILL');
  await nats?.dispose();
  await db?.drop();
});

/** Stop NATS for a second and start it again on the same store. */
const restart = async () => {
  await nats.stop();
  await new Promise((r) => setTimeout(r, 1000));
  await nats.start();
};

/** Freeze NATS for 6 s (requests time out, connections stay open), then let it go on. */
const freeze = async () => {
  const pid = nats.pid!;
  process.kill(pid, 'SIGSTOP');
  await new Promise((r) => setTimeout(r, 6000));
  process.kill(pid, 'SIGCONT');
};

const cases: [string, number, () => Promise<void>][] = [
  ['restarted', 500, restart], ['restarted', 1500, restart], ['restarted', 3000, restart], ['frozen for 6 s', 1500, freeze],
];

for (const [what, delayMs, fault] of cases) {
  test.serial(`NATS ${what} ${delayMs} ms after serve starts: every event delivered, the process never exits`, async (t) => {
    t.timeout(180_000);
    const tenant = `tenant_${what.split(' ')[0]}_${delayMs}` as TenantId;
    let nc: NatsConnection | undefined = await serviceConnection(nats.url);
    let ep: Endpoints | undefined;
    try {
      ep = await subscribeEndpoints(nc, keys.masterKey, tenant, ENDPOINTS);
      await produce(nc, tenant, EVENTS);
      await nc.close();
      nc = undefined;

      const s = startServe(instanceEnv({ natsUrl: nats.url, databaseUrl: db.url, keys }));
      served.push(s);
      await new Promise((r) => setTimeout(r, delayMs));
      await fault();

      const expected = EVENTS * ENDPOINTS;
      const endpoints = ep;
      // The delivery path delivers before the API's thread has started (src/supervisor/api-thread.ts): both are waited for.
      await eventually(() => (s.exited || (endpoints.counts().size >= expected && s.output.includes('hookstream started')) ? true : undefined), 90_000, 'every event delivered')
        .catch(() => undefined);
      t.false(s.exited, `the service exited on its own:\n${s.output.slice(-3000)}`);
      t.is(endpoints.counts().size, expected, s.output.slice(-3000));
      t.true(s.output.includes('hookstream started'), s.output.slice(-4000));
      // One line per thing start-up waited for, not one per retry.
      const waits = s.output.split('\n').filter((l) => l.includes('start-up is waiting for'));
      t.true(waits.length <= 4, waits.join('\n'));
      t.log(waits.map((l) => (JSON.parse(l) as { msg: string }).msg).join('; ') || 'start-up did not wait');

      const stopped = Date.now();
      await s.kill('SIGTERM');
      t.is(s.exitCode, 0, s.output.slice(-2000));
      t.log(`stopped ${Date.now() - stopped} ms after SIGTERM`);
    } finally {
      await nc?.close();
      await ep?.close();
    }
  });
}
