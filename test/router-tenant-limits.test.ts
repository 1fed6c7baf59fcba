// The router enforces a tenant's `events_per_second` and `queued_deliveries` by its share: the tenant's
// events over a limit wait, in order, and are routed as it allows; another tenant's events are routed at
// once meanwhile, its ordered ones too (they wait for their own tenant's earlier events only, not for the
// router's progress over every tenant's), and nothing of the limited tenant is lost. Real service, NATS,
// Postgres and receivers.
import test from 'ava';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { eventually } from './helpers/service.ts';
import { createTenantLimitsStore } from '../src/tenants/limits.ts';
import type { TenantId } from '../src/domain/ids.ts';
import type { Received } from './helpers/receiver.ts';

let h: TestService;

const PACED = 'tenant_paced' as TenantId;
const SLOW = 'tenant_slow' as TenantId;
const ORDERED = 'tenant_ordered' as TenantId;
const QUEUED = 'tenant_queued' as TenantId;
const OTHER = 'tenant_other' as TenantId;

test.before(async () => {
  // Short attempts and retries: the queued tenant's hung deliveries stay queued, retried every second.
  // queued_deliveries holds the router's fan-out into work queues (not direct consumers, docs/tenant-isolation.md): pinned to the default path.
  h = await startTestService('router_tenant_limits', { HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_EVENT_PARTITIONS: '0', HOOKSTREAM_ATTEMPT_TIMEOUT: '3s', HOOKSTREAM_RETRY_SCHEDULE: Array(20).fill('1s').join(',') });
  // Before any event, so the router's first look at the limits already has them.
  const limits = createTenantLimitsStore(h.service.orm!);
  await limits.set(PACED, { eventsPerSecond: 10 }, 'test');
  await limits.set(QUEUED, { queuedDeliveries: 10 }, 'test');
  await limits.set(SLOW, { eventsPerSecond: 5 }, 'test');
});
test.after.always(() => h?.closeAll());

const nOf = (g: Received) => (JSON.parse(g.body) as { data: { n: number } }).data.n;
const distinct = (rs: Received[]) => new Set(rs.map(nOf)).size;
const hits = (limit: string) => h.service.metrics.tenantLimitHits.get({ limit });

/** An endpoint of `tenant` on `url`, live once a first event arrived there. */
async function endpointOf(tenant: TenantId, receiver: { url: string; waitFor(n: number, ms?: number): Promise<Received[]> }, warmUp: number) {
  await h.store.create(tenant, { url: receiver.url, events: ['user.*'] });
  await h.publish(tenant, 'user.updated', { userId: 'user_warm', n: warmUp });
  await receiver.waitFor(1, 30_000);
}

test.serial("a tenant over its events a second waits its turn; another tenant's events are routed meanwhile; none is lost", async (t) => {
  const paced = await h.receiver();
  const other = await h.receiver();
  await endpointOf(PACED, paced, -1);
  await endpointOf(OTHER, other, -1);

  // 150 events at 10 a second (after a burst of 10): about 14 s to route them all.
  const EVENTS = 150;
  for (let n = 0; n < EVENTS; n++) await h.publish(PACED, 'user.updated', { userId: `user_${n}`, n });
  for (let n = 0; n < 5; n++) await h.publish(OTHER, 'user.updated', { userId: `user_${n}`, n });
  await other.waitFor(6, 30_000);
  const pacedMeanwhile = distinct(paced.received) - 1;
  t.log(`when the other tenant's 5 events had arrived, the paced tenant's had ${pacedMeanwhile} of ${EVENTS}`);
  t.true(pacedMeanwhile < EVENTS / 2, 'the other tenant did not wait behind the paced tenant\'s events');
  t.true(hits('events_per_second') > 0, 'counted by hookstream_tenant_limit_hits_total{limit="events_per_second"}');

  await eventually(() => (distinct(paced.received) === EVENTS + 1 ? true : undefined), 90_000, 'every paced event delivered');
  t.pass();
});

test.serial("a tenant at its queued deliveries waits until its queue drains; another tenant's events are routed meanwhile; none is lost", async (t) => {
  let answering = false;
  const queued = await h.receiver((g) => (answering || nOf(g) < 0 ? 200 : 'hang'));
  const other = await h.receiver();
  await endpointOf(QUEUED, queued, -1);
  await endpointOf(OTHER, other, -2);

  // Its receiver hangs: each delivery stays queued (in flight, then waiting for a retry).
  const EVENTS = 40;
  for (let n = 0; n < EVENTS; n++) await h.publish(QUEUED, 'user.updated', { userId: `user_${n}`, n });
  await eventually(() => (hits('queued_deliveries') > 0 ? true : undefined), 30_000, 'the queued tenant\'s events held for its quota');
  for (let n = 0; n < 5; n++) await h.publish(OTHER, 'user.updated', { userId: `user_${n}`, n: 100 + n });
  await eventually(() => (other.received.filter((g) => nOf(g) >= 100).length >= 5 ? true : undefined), 30_000, 'the other tenant\'s events');
  const queuedMeanwhile = distinct(queued.received) - 1;
  t.log(`while its receiver hung, the queued tenant's receiver saw ${queuedMeanwhile} of ${EVENTS} events`);
  t.true(queuedMeanwhile < EVENTS, 'the queued tenant\'s events beyond its quota waited in the router');

  // Its receiver answers again: the queue drains, and every held event follows.
  answering = true;
  await eventually(() => (distinct(queued.received) === EVENTS + 1 ? true : undefined), 90_000, 'every queued event delivered');
  t.pass();
});

test.serial("another tenant's ordered deliveries do not wait for a tenant's events the router holds back", async (t) => {
  const slow = await h.receiver();
  const ordered = await h.receiver();
  await endpointOf(SLOW, slow, -1);
  await h.store.create(ORDERED, { url: ordered.url, events: ['user.*'], ordering: 'key' });
  await h.publish(ORDERED, 'user.updated', { userId: 'user_warm', n: -1 });
  await ordered.waitFor(1, 30_000);

  // 100 events at 5 a second: unacked in EVENTS for about 20 s, before the ordered tenant's events (which
  // waited for the router's progress over every tenant's events before).
  const EVENTS = 100;
  for (let n = 0; n < EVENTS; n++) await h.publish(SLOW, 'user.updated', { userId: `user_${n}`, n });
  // Five keys at once, and one key's events one after another (each routed before the next is published).
  for (let n = 0; n < 5; n++) await h.publish(ORDERED, 'user.updated', { userId: `user_k${n}`, n: 10 + n });
  for (let n = 0; n < 5; n++) {
    await h.publish(ORDERED, 'user.updated', { userId: 'user_1', n });
    await new Promise((r) => setTimeout(r, 500));
  }
  // And one key's five back to back, each published before the router has routed the one before.
  for (let n = 20; n < 25; n++) await h.publish(ORDERED, 'user.updated', { userId: 'user_2', n });
  await ordered.waitFor(16, 60_000);
  const slowMeanwhile = distinct(slow.received) - 1;
  t.log(`when the ordered tenant's 15 events had arrived, the held tenant's had ${slowMeanwhile} of ${EVENTS}`);
  t.deepEqual(ordered.received.map(nOf).filter((n) => n >= 0 && n < 10), [0, 1, 2, 3, 4], 'one key in order');
  t.deepEqual(ordered.received.map(nOf).filter((n) => n >= 20), [20, 21, 22, 23, 24], 'one key published back to back in order');
  t.true(slowMeanwhile < EVENTS / 2, 'the ordered deliveries did not wait for the held tenant\'s events');
  await eventually(() => (distinct(slow.received) === EVENTS + 1 ? true : undefined), 90_000, 'every held event delivered');
});
