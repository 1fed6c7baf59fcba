// Endpoint changes racing the delivery role (issue 17, point 6), across two instances: endpoints created
// while a delivery instance starts get their pull loop there, and a delete followed at once by a restore
// never purges what was routed after the restore. Real NATS, Postgres, router, two delivery instances.
import test from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { loadConfig } from '../src/config.ts';
import { startService, type RunningService } from '../src/service.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';

let h: TestService;

// The harness runs every role but delivery: the delivery instances are started by the tests.
test.before(async () => {
  h = await startTestService('reconcile_races', { HOOKSTREAM_ROLES: 'api,router,projector,deadletter,admin' });
});
test.after.always(() => h?.closeAll());

const startDeliveryInstance = (): Promise<RunningService> => startService(loadConfig({
  NATS_URL: h.nats.url, DATABASE_URL: h.db.url, OPS_PORT: '0', HOOKSTREAM_ROLES: 'delivery',
  HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1', HOOKSTREAM_DELIVERY_SHARDS: '2', HOOKSTREAM_RETRY_SCHEDULE: '1s,2s',
  // The first instance's partitions and direct delivery: both are fixed once set (TEST_DIRECT_DELIVERY=1).
  HOOKSTREAM_EVENT_PARTITIONS: String(h.config.eventPartitions), HOOKSTREAM_DIRECT_DELIVERY: h.config.directDelivery ? '1' : '0',
  HOOKSTREAM_MASTER_KEY: h.keys.masterKey, HOOKSTREAM_LOG_LEVEL: 'error',
}), h.log);

/**
 * Endpoints the start-up test creates: a fixed number, a third before the instance starts and the rest while
 * it starts (not as many as fit in its start-up: on a loaded machine that was thousands, and slow).
 */
const STARTUP_ENDPOINTS = 300;

test.serial('endpoints created while a delivery instance starts are delivered by it', async (t) => {
  const r = await h.receiver(() => 200);
  const tenant = 'tenant_startup' as TenantId;
  // Each endpoint on a path of its own, so a second POST to one of them is seen as such.
  const ids: EndpointId[] = [];
  const create = async () => { ids.push((await h.store.create(tenant, { url: `${r.url}/e${ids.length}`, events: ['user.created'] })).endpoint.id); };
  while (ids.length < STARTUP_ENDPOINTS / 3) await create();
  // The rest before, during and after the instance's start-up snapshot.
  const creating = (async () => { while (ids.length < STARTUP_ENDPOINTS) await create(); })();
  const d = await startDeliveryInstance();
  t.teardown(() => d.stop());
  await creating;
  await h.publish(tenant, 'user.created', { userId: 'user_1' });
  const got = await eventually(() => (r.received.length >= ids.length ? r.received : undefined), 30_000, `one delivery to each of ${ids.length} endpoints`);
  t.is(new Set(got.map((x) => String(x.headers['webhook-id']))).size, 1, 'one event');
  await new Promise((res) => setTimeout(res, 500));
  t.is(new Set(r.received.map((x) => x.path)).size, ids.length, 'every endpoint');
  t.is(r.received.length, ids.length, 'each endpoint once');
});

test.serial('a delete followed at once by a restore, seen by two instances: what is routed after the restore is delivered', async (t) => {
  const a = await startDeliveryInstance();
  t.teardown(() => a.stop());
  const b = await startDeliveryInstance();
  t.teardown(() => b.stop());
  const r = await h.receiver(() => 200);
  const tenant = 'tenant_restore' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['user.updated'] });
  await eventually(() => (a.directory?.get(endpoint.id) && b.directory?.get(endpoint.id) ? true : undefined), 10_000, 'both instances to see it');
  // Deletes and restores in a row: each instance may see any of the deletes late, after later restores.
  for (let round = 0; round < 10; round++) {
    await h.store.delete(tenant, endpoint.id);
    await h.store.restore(tenant, endpoint.id);
  }
  // A delete purges what is queued at that moment; what is routed after the last restore must all arrive.
  for (let i = 0; i < 10; i++) await h.publish(tenant, 'user.updated', { userId: `user_${i}` });
  const got = await eventually(() => (r.received.length >= 10 ? r.received : undefined), 20_000, 'the ten events routed after the last restore');
  const users = got.map((x) => (JSON.parse(x.body) as { data: { userId: string } }).data.userId);
  t.deepEqual([...new Set(users)].sort(), Array.from({ length: 10 }, (_, i) => `user_${i}`).sort());
});
