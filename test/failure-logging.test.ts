// Failed attempts logged at a level that does not flood (issue 23): a receiver failing 1,000 attempts
// writes one warning for its attempts and one for its dead deliveries, not 1,000 lines; every attempt and
// death is still counted in metrics, and the endpoint's recovery is said once. The sampling itself, on a
// clock of the test's own, below.
import test from 'ava';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { eventually } from './helpers/service.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { createLogger } from '../src/log.ts';
import { createSampledWarnings } from '../src/sampled-log.ts';

let h: TestService;
const lines: { level: string; msg: string; [k: string]: unknown }[] = [];

test.before(async () => {
  h = await startTestService('failure_logging', {
    HOOKSTREAM_RETRY_SCHEDULE: '20ms,20ms,20ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '2s', HOOKSTREAM_LOG_LEVEL: 'info',
  }, { logWrite: (l) => lines.push(JSON.parse(l) as (typeof lines)[number]) });
});

test.after.always(() => h?.closeAll());

async function metric(name: string): Promise<number> {
  const text = await (await fetch(`${h.service.opsUrl}/metrics`)).text();
  return text.split('\n').filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `)).reduce((n, l) => n + Number(l.split(' ').pop()), 0);
}

test('a receiver failing 1,000 attempts: two warnings, not 1,000 lines; metrics count every one; recovery said once', async (t) => {
  let healthy = false;
  const r = await h.receiver(() => (healthy ? 200 : 500));
  const tenant = 'tenant_flood' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['user.*'] });
  // Four attempts each: 250 events make (about) 1,000 failed attempts and 250 dead deliveries.
  for (let i = 0; i < 250; i++) await h.publish(tenant, 'user.updated', { userId: `user_${i}` });
  await eventually(async () => (await metric('hookstream_deliveries_dead_total')) >= 250 ? true : undefined, 120_000, '250 dead deliveries');
  await eventually(async () => (await metric('hookstream_dead_letters_stored_total')) >= 250 ? true : undefined, 60_000, '250 dead letters');
  // Four deliveries each, so at most four POSTs: one handed out again while its attempt still ran (a busy
  // machine outruns the 20 ms ack wait's keep-alives) is left to that attempt, and it counts as one of four.
  const posts = new Map<string, number>();
  for (const g of r.received) { const id = String(g.headers['webhook-id']); posts.set(id, (posts.get(id) ?? 0) + 1); }
  t.is(posts.size, 250);
  t.true([...posts.values()].every((n) => n >= 1 && n <= 4), 'one to four POSTs each');
  t.true(r.received.length > 900, `${r.received.length} POSTs`);
  const attempts = r.received.length;
  t.is(await metric('hookstream_delivery_attempts_failed_total'), attempts, 'every failed attempt counted');

  const about = (msg: string) => lines.filter((l) => l.msg === msg && l['endpoint'] === endpoint.id);
  t.deepEqual(about('delivery attempt failed').map((l) => l.level), ['warn'], 'the first failure only, as a warning');
  t.like(about('delivery attempt failed')[0], { attempt: 1, status: 500, tenant });
  t.deepEqual(about('delivery is dead; dead letter stored').map((l) => l.level), ['warn'], 'the first death only');
  t.true(lines.filter((l) => l.level === 'warn').length < 10, `${lines.filter((l) => l.level === 'warn').length} warnings in all`);
  t.false(lines.some((l) => l.level === 'debug'), 'nothing below the configured level is written');

  healthy = true;
  await h.publish(tenant, 'user.updated', { userId: 'user_back' });
  const back = await eventually(async () => about('endpoint accepts deliveries again')[0], 20_000, 'the recovery line');
  t.like(back, { level: 'info', tenant, failed_attempts: attempts });
  // Failing again after recovering is a new state change: said at once.
  healthy = false;
  await h.publish(tenant, 'user.updated', { userId: 'user_again' });
  await eventually(async () => (about('delivery attempt failed').length === 2 ? true : undefined), 20_000, 'a second first failure');
});

test('sampling: first warning, then debug until the interval has passed, then a warning with how many were quieter', (t) => {
  let now = 0;
  const out: { level: string; msg: string; quieter?: number }[] = [];
  const log = createLogger({ level: 'debug', write: (l) => out.push(JSON.parse(l) as (typeof out)[number]) });
  const w = createSampledWarnings(log, { intervalMs: 1000, now: () => now });
  w.warn('a', 'failed', {});
  w.warn('a', 'failed', {});
  w.warn('b', 'failed', {}); // another key: its own first warning
  now = 999;
  w.warn('a', 'failed', {});
  now = 1000;
  w.warn('a', 'failed', {});
  t.deepEqual(out.map((l) => [l.level, l.quieter]), [['warn', undefined], ['debug', undefined], ['warn', undefined], ['debug', undefined], ['warn', 2]]);
  t.is(w.clear('a'), 4, 'four warnings since the first');
  t.is(w.clear('a'), undefined);
  w.warn('a', 'failed', {});
  t.is(out.at(-1)!.level, 'warn', 'cleared: the next one is a first one');
  // A key with no warning for two intervals is forgotten: its next warning is a first one, without a count.
  now = 5000;
  w.warn('c', 'failed', {});
  t.is(w.clear('b'), undefined, 'b forgotten');
});
