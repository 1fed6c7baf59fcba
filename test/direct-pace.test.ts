// Direct delivery and a tenant's `events_per_second` (src/delivery/tenant-pace.ts): an endpoint reading its
// tenant's partition stream is handed that many copies a second; the rest wait unpulled at the server, in
// its consumer, while another tenant's events are delivered at once; none is lost; two delivery instances
// share the rate rather than each handing out all of it. Real service, NATS, Postgres and receivers.
import test from 'ava';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { eventually } from './helpers/service.ts';
import type { Received } from './helpers/receiver.ts';
import { createTenantLimitsStore } from '../src/tenants/limits.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { tenantPartition } from '../src/domain/partition.ts';
import { partitionStream } from '../streams/events.ts';
import { startService } from '../src/service.ts';

const PARTITIONS = 4;
const PACED = 'tenant_paced' as TenantId;
const OTHER = 'tenant_other' as TenantId;
const SHARED = 'tenant_shared' as TenantId;
let h: TestService;

test.before(async () => {
  h = await startTestService('direct_pace', { HOOKSTREAM_EVENT_PARTITIONS: String(PARTITIONS), HOOKSTREAM_DIRECT_DELIVERY: '1' });
  // Before any event, so the delivery role's first look at the limits already has them.
  const limits = createTenantLimitsStore(h.service.orm!);
  await limits.set(PACED, { eventsPerSecond: 10 }, 'test');
  await limits.set(SHARED, { eventsPerSecond: 10 }, 'test');
});
test.after.always(() => h?.closeAll());

const nOf = (g: Received) => (JSON.parse(g.body) as { data: { n: number } }).data.n;
const distinct = (rs: Received[]) => new Set(rs.map(nOf)).size;

test.serial('a tenant over its events a second is handed them at that pace, the rest waiting in its consumer; another tenant\'s are sent meanwhile; none is lost', async (t) => {
  const paced = await h.receiver();
  const other = await h.receiver();
  const id = (await h.store.create(PACED, { url: paced.url, events: ['user.*'] })).endpoint.id;
  await h.store.create(OTHER, { url: other.url, events: ['user.*'] });
  // Past the consumers' start slack (1 s): each is made from its creation on.
  await new Promise((resolve) => setTimeout(resolve, 1500));

  // 150 events at 10 a second (after a burst of 10): about 14 s to hand them all out.
  const EVENTS = 150;
  for (let n = 0; n < EVENTS; n++) await h.publish(PACED, 'user.updated', { userId: `user_${n}`, n });
  for (let n = 0; n < 5; n++) await h.publish(OTHER, 'user.updated', { userId: `user_${n}`, n });
  await other.waitFor(5, 30_000);
  const pacedMeanwhile = distinct(paced.received);
  t.log(`when the other tenant's 5 events had arrived, the paced tenant's had ${pacedMeanwhile} of ${EVENTS}`);
  t.true(pacedMeanwhile < EVENTS / 2, 'the paced tenant\'s events were not all handed out at once');
  const ci = await h.service.jsm.consumers.info(partitionStream(tenantPartition(PACED, PARTITIONS)), id);
  t.true(ci.num_pending > 0, `the rest wait unpulled in its consumer (${ci.num_pending})`);
  t.true(h.service.metrics.tenantLimitHits.get({ limit: 'events_per_second' }) > 0, 'counted by hookstream_tenant_limit_hits_total{limit="events_per_second"}');

  await eventually(() => (distinct(paced.received) === EVENTS ? true : undefined), 90_000, 'every paced event delivered');
  t.pass();
});

test.serial('two delivery instances share a tenant\'s events a second: together they hand out the rate, not twice it', async (t) => {
  const second = await startService({ ...h.config, roles: ['delivery'] }, h.log);
  t.teardown(() => second.stop());
  const r = await h.receiver();
  await h.store.create(SHARED, { url: r.url, events: ['user.*'] });
  // Past the consumers' start slack (1 s), and a few heartbeats: each instance hears the other.
  await new Promise((resolve) => setTimeout(resolve, 3000));

  const EVENTS = 100;
  for (let n = 0; n < EVENTS; n++) await h.publish(SHARED, 'user.updated', { userId: `user_${n}`, n });
  await r.waitFor(1, 30_000);
  await new Promise((resolve) => setTimeout(resolve, 3000));
  const inThreeSeconds = distinct(r.received);
  // Shared: a second's worth at once (5 per instance), then 10 a second: about 40. Each at the whole rate:
  // 20 at once, then 20 a second: about 80. A slow machine only hands out fewer.
  t.log(`3 s after the first arrived: ${inThreeSeconds} of ${EVENTS}`);
  t.true(inThreeSeconds <= 55, `at most about the tenant's rate, not twice it (${inThreeSeconds})`);
  await eventually(() => (distinct(r.received) === EVENTS ? true : undefined), 90_000, 'every event delivered');
  t.pass();
});
