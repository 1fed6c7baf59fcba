// A delivery that starts after its subject's erasure began: the erasure destroys the subject's data key
// first (src/erasure/data-keys.ts), so an attempt made after that instant cannot open the body. Here the
// key is destroyed while the delivery waits for its retry at the server and is left in its queue (the
// window between erasure's first step and its deletion of the queued copy): the retry drops it, acked and
// recorded in the delivery log as dropped, never POSTed and never dead-lettered. Another user's delivery
// to the same endpoint goes on. Real NATS, Postgres and receiver.
import test from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { createDataKeys, destroyDataKeys } from '../src/erasure/data-keys.ts';
import { deliveryAddress } from '../streams/deliveries.ts';

let h: TestService;
let admin: AdminClient;
const SCHEDULE_MS = [2000, 2000, 2000];

test.before(async () => {
  // The data keys of sealed deliveries in work queues (direct delivery seals nothing on the way): pinned to the default path.
  h = await startTestService('erasure_inflight', { HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_EVENT_PARTITIONS: '0', HOOKSTREAM_RETRY_SCHEDULE: SCHEDULE_MS.map((ms) => `${ms}ms`).join(',') });
  ({ admin } = await h.operator({ timeoutMs: 60_000 }));
});
test.after.always(() => h?.closeAll());

const userOf = (body: string) => (JSON.parse(body) as { data: { userId: string } }).data.userId;

test.serial('an attempt after the data key is destroyed drops the delivery as erased: not sent, not dead-lettered, in the delivery log', async (t) => {
  const tenant = 'tenant_erase_inflight';
  let failing = true;
  const r = await h.receiver(() => (failing ? 500 : 204));
  const { endpoint } = await h.store.create(tenant as TenantId, { url: r.url, events: ['*'] });
  await h.publish(tenant, 'user.updated', { userId: 'user_gone', note: 'shred me' });
  await h.publish(tenant, 'user.updated', { userId: 'user_stays', note: 'keep me' });
  await r.waitFor(2, 20_000);
  const webhookId = r.received.find((m) => userOf(m.body) === 'user_gone')!.headers['webhook-id'] as string;

  // Both wait for their retry; only user_gone's key goes, its delivery stays queued.
  const keys = createDataKeys({ nc: h.service.nc, jsm: h.service.jsm, masterKey: h.keys.masterKey });
  t.teardown(() => keys.close());
  const refs = await keys.refsOf(tenant, [{ kind: 'user', id: 'user_gone' }]);
  t.is(await destroyDataKeys(h.service, tenant, refs), 1);
  failing = false;

  await eventually(() => (r.received.some((m) => userOf(m.body) === 'user_stays' && r.received.indexOf(m) > 1) ? true : undefined), 20_000, "user_stays' retry delivered");
  const log = await eventually(async () => {
    const page = await admin.deliveryAttempts({ webhook_id: webhookId, endpoint: endpoint.id });
    return page.data.some((a) => a.status === 'dropped') ? page.data : undefined;
  }, 20_000, 'the drop in the delivery log');
  t.like(log.find((a) => a.status === 'dropped'), { error: 'dropped: its data subject was erased' });
  t.is(r.received.filter((m) => userOf(m.body) === 'user_gone').length, 1, 'never POSTed after the key was destroyed');
  const address = deliveryAddress(endpoint.id, h.config.deliveryShards);
  const info = await h.service.jsm.streams.info(address.stream, { subjects_filter: address.subject });
  t.falsy(info.state.subjects?.[address.subject], 'acked: gone from its queue');
  t.is((await admin.listDeadLetters({ endpoint: endpoint.id })).data.length, 0, 'not dead-lettered');
});

test.serial('a delivery that died before its key was destroyed, dead-lettered after: no dead letter holds it', async (t) => {
  const tenant = 'tenant_erase_dead';
  // No dead-letter role for now: the max-deliveries advisories wait in their stream.
  const all = h.config.roles.join(',');
  await h.restart({ HOOKSTREAM_ROLES: h.config.roles.filter((r) => r !== 'deadletter').join(',') });
  t.teardown(() => h.restart({ HOOKSTREAM_ROLES: all }));
  const r = await h.receiver(() => 500);
  const { endpoint } = await h.store.create(tenant as TenantId, { url: r.url, events: ['*'] });
  await h.publish(tenant, 'user.updated', { userId: 'user_dead', note: 'shred me' });
  await h.publish(tenant, 'user.updated', { userId: 'user_alive', note: 'keep me' });
  await r.waitFor(2 * (SCHEDULE_MS.length + 1), 30_000);
  const keys = createDataKeys({ nc: h.service.nc, jsm: h.service.jsm, masterKey: h.keys.masterKey });
  t.teardown(() => keys.close());
  t.is(await destroyDataKeys(h.service, tenant, await keys.refsOf(tenant, [{ kind: 'user', id: 'user_dead' }])), 1);

  await h.restart({ HOOKSTREAM_ROLES: all });
  const address = deliveryAddress(endpoint.id, h.config.deliveryShards);
  await eventually(async () => {
    const info = await h.service.jsm.streams.info(address.stream, { subjects_filter: address.subject });
    return info.state.subjects?.[address.subject] ? undefined : true;
  }, 30_000, 'both removed from the queue');
  const letters = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint: endpoint.id });
    return page.data.length > 0 ? page.data : undefined;
  }, 30_000, "user_alive's dead letter");
  const alive = r.received.find((m) => userOf(m.body) === 'user_alive')!.headers['webhook-id'];
  t.deepEqual(letters.map((l) => l.webhook_id), [alive], "only user_alive's");
});
