// Direct delivery and a tenant's `events_per_second` (src/delivery/tenant-pace.ts): an endpoint reading its
// tenant's partition stream is handed that many copies a second; the rest wait unpulled at the server, in
// its consumer, while another tenant's events are delivered at once; none is lost. Real service, NATS,
// Postgres and receivers.
import test from 'ava';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { eventually } from './helpers/service.ts';
import type { Received } from './helpers/receiver.ts';
import { createTenantLimitsStore } from '../src/tenants/limits.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { tenantPartition } from '../src/domain/partition.ts';
import { partitionStream } from '../streams/events.ts';

const PARTITIONS = 4;
const PACED = 'tenant_paced' as TenantId;
const OTHER = 'tenant_other' as TenantId;
let h: TestService;

test.before(async () => {
  h = await startTestService('direct_pace', { HOOKSTREAM_EVENT_PARTITIONS: String(PARTITIONS), HOOKSTREAM_DIRECT_DELIVERY: '1' });
  // Before any event, so the delivery role's first look at the limits already has them.
  await createTenantLimitsStore(h.service.orm!).set(PACED, { eventsPerSecond: 10 }, 'test');
});
test.after.always(() => h?.closeAll());

const nOf = (g: Received) => (JSON.parse(g.body) as { data: { n: number } }).data.n;
const distinct = (rs: Received[]) => new Set(rs.map(nOf)).size;

test('a tenant over its events a second is handed them at that pace, the rest waiting in its consumer; another tenant\'s are sent meanwhile; none is lost', async (t) => {
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
