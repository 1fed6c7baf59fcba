// Issue 17: an endpoint's queue holds HOOKSTREAM_MAX_QUEUED deliveries (5 here). Past it, the next delivery
// is refused and the refusal is visible: counted, announced once (endpoint.queue_full), and `deliveries
// show` answers `dropped`, never `acknowledged`. The oldest, waiting for their retries, stay; the event is
// still routed to the tenant's other endpoints. Real NATS, Postgres and receivers.
import test from 'ava';
import { jetstreamManager } from '@nats-io/jetstream';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { opsSubject, OPS_STREAM, type OpsEvent } from '../streams/ops.ts';
import { deliveryAddress } from '../streams/deliveries.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { TenantId } from '../src/domain/ids.ts';

const BOUND = 5;
let h: TestService;
let admin: AdminClient;

test.before(async () => {
  h = await startTestService('queue_bound', {
    // HOOKSTREAM_MAX_QUEUED bounds a work queue; a direct consumer has no queue (docs/architecture.md): pinned to the default path.
    HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_EVENT_PARTITIONS: '0',
    HOOKSTREAM_MAX_QUEUED: String(BOUND), HOOKSTREAM_RETRY_SCHEDULE: '30s,30s', HOOKSTREAM_ATTEMPT_TIMEOUT: '5s',
  });
  ({ admin } = await h.operator({ timeoutMs: 20_000 }));
});
test.after.always(() => h?.closeAll());

async function metric(name: string): Promise<number> {
  const text = await (await fetch(`${h.service.opsUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : 0;
}

test.serial('a full queue refuses the newest deliveries, visibly; the oldest keep their retries, other endpoints get everything', async (t) => {
  const tenant = 'tenant_queue_bound' as TenantId;
  const failing = await h.receiver(() => 500);
  const healthy = await h.receiver(() => 200);
  const { endpoint: full } = await h.store.create(tenant, { url: failing.url, events: ['user.*'] });
  await h.store.create(tenant, { url: healthy.url, events: ['user.*'] });
  const before = await metric('hookstream_deliveries_dropped_total');

  // One at a time, each delivered to the healthy endpoint before the next: its queue never fills.
  for (let i = 0; i < BOUND + 3; i++) {
    await h.publish(tenant, 'user.updated', { userId: `user_${i}` });
    await healthy.waitFor(i + 1, 10_000);
  }
  await eventually(async () => ((await metric('hookstream_deliveries_dropped_total')) - before === 3 ? true : undefined), 10_000, 'three drops counted');

  // The five oldest are queued, each attempted once and waiting 30 s for its retry.
  // Generous (under 30 s, the first retry): under a full suite on two cores the fifth took over 10 s once.
  await failing.waitFor(BOUND, 25_000);
  const jsm = await jetstreamManager(h.service.nc);
  const { stream, subject } = deliveryAddress(full.id, h.config.deliveryShards);
  const si = await jsm.streams.info(stream, { subjects_filter: subject });
  t.is(si.state.subjects?.[subject], BOUND, 'the queue holds its bound');
  const users = (bodies: string[]) => bodies.map((b) => (JSON.parse(b) as { data: { userId: string } }).data.userId).sort();
  t.deepEqual(users(failing.received.map((r) => r.body)), Array.from({ length: BOUND }, (_, i) => `user_${i}`).sort(), 'the oldest were kept');

  // Each refused delivery shows as dropped; a kept one as retrying.
  const ids = healthy.received.map((r) => ({ user: users([r.body])[0]!, id: String(r.headers['webhook-id']) }));
  const droppedId = ids.find((x) => x.user === `user_${BOUND + 2}`)!.id;
  const keptId = ids.find((x) => x.user === 'user_0')!.id;
  const shown = await admin.showDelivery({ webhook_id: droppedId, endpoint: full.id });
  t.is(shown.state, 'dropped');
  t.regex(shown.reason, /queue was full/);
  t.is((await admin.showDelivery({ webhook_id: keptId, endpoint: full.id })).state, 'retrying');

  // One operational event for the minute, however many were dropped.
  const ops = await eventually(async () => {
    const m = await jsm.streams.getMessage(OPS_STREAM, { last_by_subj: opsSubject(tenant, 'endpoint.queue_full') }).catch(() => null);
    return m ?? undefined;
  }, 5000, 'the endpoint.queue_full event');
  const event = ops.json<OpsEvent>();
  t.like(event, { type: 'endpoint.queue_full', tenant, endpoint: full.id, max_queued: BOUND });
  const count = (await jsm.streams.info(OPS_STREAM, { subjects_filter: opsSubject(tenant, 'endpoint.queue_full') })).state.subjects;
  t.is(count?.[opsSubject(tenant, 'endpoint.queue_full')], 1);

  // Every event was routed (acked by the router, which acks once its index batch and routed marker are
  // stored, a moment after the deliveries), none rejected.
  await eventually(async () => ((await jsm.consumers.info('EVENTS', 'router')).num_ack_pending === 0 ? true : undefined), 10_000, 'every event acked by the router');
  t.is((await jsm.consumers.info('EVENTS', 'router')).num_pending, 0);
});

test.serial('an ordered endpoint is bounded as a whole, not per key: past its bound, keyed deliveries are refused as dropped', async (t) => {
  const tenant = 'tenant_queue_bound_ordered' as TenantId;
  const failing = await h.receiver(() => 500);
  const { endpoint } = await h.store.create(tenant, { url: failing.url, events: ['user.*'], ordering: 'key' });
  const before = await metric('hookstream_deliveries_dropped_total');
  // One key each: max_msgs_per_subject would never refuse them.
  for (let i = 0; i < BOUND; i++) await h.publish(tenant, 'user.updated', { userId: `user_${i}` });
  const jsm = await jetstreamManager(h.service.nc);
  const { stream } = deliveryAddress(endpoint.id, h.config.deliveryShards);
  const storedKeys = async () => Object.keys((await jsm.streams.info(stream, { subjects_filter: `${deliveryAddress(endpoint.id, h.config.deliveryShards).subject}.>` })).state.subjects ?? {}).length;
  // The five queued, each on its key's subject, and attempts under way. (Not every one attempted: once three
  // have failed the endpoint is probed one attempt at a time, and on 2.15.1 the fifth then waited for the
  // first retry, 30 s on, in about half the runs, with the code of earlier rounds too.)
  await eventually(async () => ((await storedKeys()) === BOUND ? true : undefined), 10_000, 'the five queued');
  await failing.waitFor(1, 10_000);
  // The router counts what it routes to the endpoint on top of the backlog it last read (off the routing
  // path): past the bound it refuses. A reading that missed the last of the five lets one more in.
  await new Promise((r) => setTimeout(r, 1500));
  for (let i = 0; i < 4; i++) await h.publish(tenant, 'user.updated', { userId: `user_late_${i}` });
  const drops = await eventually(async () => {
    const n = (await metric('hookstream_deliveries_dropped_total')) - before;
    return n >= 3 && n + (await storedKeys()) === BOUND + 4 ? n : undefined;
  }, 10_000, 'every late delivery queued or counted as dropped');
  t.true(drops >= 3, `${drops} late deliveries refused`);
  t.true(await storedKeys() <= BOUND + 1, 'the five are queued, each on its key\'s subject, and at most one more');
  const shown = await admin.showDelivery({ webhook_id: String(failing.received[0]!.headers['webhook-id']), endpoint: endpoint.id });
  t.is(shown.state, 'retrying', 'a keyed delivery is found in its queue');
  t.like(shown.queued, { stream: deliveryAddress(endpoint.id, h.config.deliveryShards).stream });
});
