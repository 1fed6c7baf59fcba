// An ordered endpoint with five failing keys and 2,000 deliveries parked behind their heads: an unrelated
// key's events still arrive (issue 29; past the old parked bound of 1,000 the endpoint pulled one delivery
// a second, and such an event waited minutes). The parked deliveries stay within the bound the delivery
// role keeps (src/delivery/pull-loop.ts). Real NATS, Postgres and receiver.
import test from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Received } from './helpers/receiver.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { MAX_PARKED_BYTES_PER_ENDPOINT, MAX_PARKED_BYTES_PER_TENANT, MAX_PARKED_PER_ENDPOINT, MAX_PARKED_PER_TENANT, roomToPark } from '../src/delivery/pull-loop.ts';

const FAILING_KEYS = 5;
const PER_KEY = 400;

let h: TestService;

test.before(async () => {
  // The failing heads' retries come after the test.
  h = await startTestService('ordered_parked', { HOOKSTREAM_RETRY_SCHEDULE: '60s,60s' });
});

test.after.always(() => h?.closeAll());

interface Body { data: { userId?: string; n?: number } }
const bodyOf = (r: Received) => JSON.parse(r.body) as Body;

async function parkedGauge(): Promise<number> {
  const text = await (await fetch(`${h.service.opsUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith('hookstream_delivery_messages_parked '));
  return line ? Number(line.split(' ')[1]) : 0;
}

test('five failing keys and 2,000 parked deliveries: an unrelated key of the endpoint keeps flowing', async (t) => {
  const tenant = 'tenant_parked' as TenantId;
  const r = await h.receiver((g) => (bodyOf(g).data.userId?.startsWith('user_fail') ? 503 : 204));
  await h.store.create(tenant, { url: r.url, events: ['user.*'], ordering: 'key' });
  for (let n = 0; n < PER_KEY; n++) {
    await Promise.all(Array.from({ length: FAILING_KEYS }, (_, k) => h.publish(tenant, 'user.updated', { userId: `user_fail${k}`, n })));
  }
  const parked = await eventually(async () => {
    const p = await parkedGauge();
    return p >= FAILING_KEYS * (PER_KEY - 1) ? p : undefined;
  }, 60_000, 'the failing keys\' deliveries parked behind their heads');
  t.log(`parked: ${parked}`);
  t.true(parked <= MAX_PARKED_PER_ENDPOINT);

  const started = Date.now();
  for (let n = 0; n < 3; n++) await h.publish(tenant, 'user.updated', { userId: 'user_free', n });
  const free = () => r.received.filter((g) => bodyOf(g).data.userId === 'user_free');
  await eventually(() => (free().length >= 3 ? true : undefined), 20_000, 'the unrelated key\'s events');
  t.log(`the unrelated key's three events arrived within ${Date.now() - started} ms`);
  t.deepEqual(free().map((g) => bodyOf(g).data.n), [0, 1, 2]);
  // Nothing behind a failing head was attempted.
  t.is(r.received.filter((g) => bodyOf(g).data.userId?.startsWith('user_fail')).length, FAILING_KEYS);
});

test("the parked bound: an endpoint's own, and its tenant's over all its ordered endpoints, by count and bytes", (t) => {
  const none = { parked: 0, bytes: 0 };
  t.is(roomToPark(none), MAX_PARKED_PER_ENDPOINT);
  t.is(roomToPark({ parked: MAX_PARKED_PER_ENDPOINT - 3, bytes: 0 }), 3);
  t.is(roomToPark({ parked: 1, bytes: MAX_PARKED_BYTES_PER_ENDPOINT }), 0);
  // The tenant's other ordered endpoints park too: this one gets what is left of the tenant's bound.
  const own = { parked: 100, bytes: 100_000 };
  const withOwn = (other: { parked: number; bytes: number }) => ({ parked: own.parked + other.parked, bytes: own.bytes + other.bytes });
  t.is(roomToPark(own, withOwn({ parked: MAX_PARKED_PER_TENANT - 150, bytes: 0 })), 50);
  t.is(roomToPark(own, withOwn({ parked: MAX_PARKED_PER_TENANT, bytes: 0 })), 0);
  t.is(roomToPark(own, withOwn({ parked: 10, bytes: MAX_PARKED_BYTES_PER_TENANT - own.bytes })), 0);
  t.is(roomToPark(own, withOwn(none)), MAX_PARKED_PER_ENDPOINT - 100);
});
