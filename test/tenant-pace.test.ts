// A tenant's `events_per_second` on the direct path (src/delivery/tenant-pace.ts), with no server: a lane
// is handed a second's worth at once, then the rate; a limit of 0 holds everything; a changed limit applies
// at once; waiting for the rate is counted once each time it starts.
import test from 'ava';
import { createTenantPaces } from '../src/delivery/tenant-pace.ts';
import { DEFAULT_TENANT_LIMITS, type TenantLimits } from '../src/tenants/limits.ts';

function setUp(rate: number) {
  let now = 0;
  let hits = 0;
  const limits: TenantLimits = { ...DEFAULT_TENANT_LIMITS, eventsPerSecond: rate };
  const paces = createTenantPaces({ limits: { current: () => limits }, hits: { inc: () => void hits++ }, now: () => now });
  return { pace: paces.of('tenant_p'), limits, advance: (ms: number) => void (now += ms), hits: () => hits };
}

test('a second\'s worth at once, then the rate; counted once per wait', (t) => {
  const { pace, advance, hits } = setUp(10);
  t.is(pace.available(), 10);
  for (let i = 0; i < 10; i++) pace.spend();
  t.is(pace.available(), 0);
  t.is(pace.available(), 0);
  t.is(hits(), 1, 'one wait, however often it is asked');
  t.is(pace.wait(), 100, 'the next token in a tenth of a second');
  advance(250);
  t.is(pace.available(), 2);
  pace.spend();
  pace.spend();
  t.is(pace.available(), 0);
  t.is(hits(), 2);
  advance(10_000);
  t.is(pace.available(), 10, 'never more than a second\'s worth');
});

test('a limit of 0 holds everything, looked at again every second; a raised limit applies at once', (t) => {
  const { pace, limits, advance } = setUp(0);
  t.is(pace.available(), 0);
  t.is(pace.wait(), 1000);
  advance(5000);
  t.is(pace.available(), 0);
  limits.eventsPerSecond = 100;
  advance(100);
  t.is(pace.available(), 10);
});

test('the default limit without a limits store', (t) => {
  const pace = createTenantPaces({}).of('tenant_q');
  t.is(pace.available(), DEFAULT_TENANT_LIMITS.eventsPerSecond);
});

test('shared by the delivery instances alive: each paces at its share, at least one copy when the share is below one a second', (t) => {
  let now = 0;
  let instances = 3;
  const limits: TenantLimits = { ...DEFAULT_TENANT_LIMITS, eventsPerSecond: 30 };
  const pace = createTenantPaces({ limits: { current: () => limits }, instances: () => instances, now: () => now }).of('tenant_s');
  t.is(pace.available(), 10, 'a third of a second\'s worth');
  for (let i = 0; i < 10; i++) pace.spend();
  now += 1000;
  t.is(pace.available(), 10, 'a third of the rate');
  instances = 1;
  now += 1000;
  t.is(pace.available(), 30, 'alone again: the whole rate');
  limits.eventsPerSecond = 1;
  instances = 4;
  const slow = createTenantPaces({ limits: { current: () => limits }, instances: () => instances, now: () => now }).of('tenant_s');
  t.is(slow.available(), 1, 'a share of a quarter a second still comes out');
  slow.spend();
  t.is(slow.available(), 0);
  t.is(slow.wait(), 4000, 'its next copy in four seconds');
  now += 4000;
  t.is(slow.available(), 1);
});
