// Receivers in control (issue 10, delivery side): Retry-After on 429/503, 429s lowering an endpoint's
// concurrency, and a per-endpoint rate limit held across two delivery instances. Real NATS, real HTTP.
// Serial: concurrency is per process, and the second instance of the rate-limit test would pull every
// endpoint's consumer too.
import test from 'ava';
import { isRetiredRateLimitStream, rateBuckets } from '../streams/rate-limits.ts';
import { eventually, queuedDeliveries } from './helpers/service.ts';
import { watchRateTokens } from './helpers/rate-tokens.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import { ATTEMPTS_STREAM, attemptSubject, type AttemptRecord } from '../streams/attempts.ts';
import type { AdminClient } from '../src/admin/client.ts';
import { loadConfig } from '../src/config.ts';
import { startService } from '../src/service.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';

// Retries 1-3 wait 300 ms, 600 ms, 2.5 s; the 4th attempt is the last (max_retries 3).
const SCHEDULE = [300, 600, 2500];
const MAX_IN_FLIGHT = 8;

let h: TestService;
let admin: AdminClient;

const publish = (tenant: string, n = 1) => Promise.all(Array.from({ length: n }, (_, i) =>
  h.publish(tenant, 'user.updated', { userId: `user_${i}` })));

async function lastRecord(endpoint: string, webhookId: string): Promise<AttemptRecord> {
  return eventually(async () => {
    const m = await h.service.jsm.streams.getMessage(ATTEMPTS_STREAM, { last_by_subj: attemptSubject(endpoint, webhookId) }).catch(() => null);
    return m?.json<AttemptRecord>();
  }, 10_000, 'an attempt record');
}

async function records(endpoint: string, webhookId: string): Promise<AttemptRecord[]> {
  const out: AttemptRecord[] = [];
  for (let seq = 0; ;) {
    const m = await h.service.jsm.streams.getMessage(ATTEMPTS_STREAM, { seq, next_by_subj: attemptSubject(endpoint, webhookId) } as never).catch(() => null);
    if (!m) return out;
    out.push(m.json<AttemptRecord>());
    seq = m.seq + 1;
  }
}

const webhookIdOf = (r: Receiver, i: number) => String(r.received[i]!.headers['webhook-id']);

test.before(async () => {
  h = await startTestService('receiver_control', {
    HOOKSTREAM_RETRY_SCHEDULE: SCHEDULE.map((ms) => `${ms}ms`).join(','),
    HOOKSTREAM_ATTEMPT_TIMEOUT: '5s',
    HOOKSTREAM_MAX_IN_FLIGHT: String(MAX_IN_FLIGHT),
  });
  ({ admin } = await h.operator({ timeoutMs: 20_000 }));
});

test.after.always(() => h?.closeAll());

test.serial('429 with Retry-After in seconds: the next attempt is that far off, recorded, and shown as waiting on it', async (t) => {
  // 429 until the test has looked at the waiting delivery: under load, looking can take longer than 2 s.
  let looked = false;
  const r = await h.receiver((_req, n) => (n === 0 || !looked ? { status: 429, headers: { 'retry-after': '2' } } : 204));
  const { endpoint } = await h.store.create('tenant_ra_secs' as TenantId, { url: r.url, events: ['*'] });
  await publish('tenant_ra_secs');
  await r.waitFor(1);
  const webhookId = webhookIdOf(r, 0);
  const rec = await lastRecord(endpoint.id, webhookId);
  t.like(rec, { attempt: 1, status: 429, retry_after_ms: 2000, next_attempt_by: 'retry_after' });
  const due = Date.parse(rec.next_attempt_at!);
  t.true(due - r.received[0]!.at >= 2000, `next attempt recorded ${due - r.received[0]!.at} ms after the first`);
  // While it waits, deliveries show says why.
  const shown = await admin.showDelivery({ webhook_id: webhookId, endpoint: endpoint.id });
  looked = true;
  t.like(shown, { state: 'retrying', waiting_on: 'retry_after' });
  t.true((await records(endpoint.id, webhookId)).some((x) => x.next_attempt_at === shown.next_attempt_at), 'the time a record planned');
  t.regex(shown.reason, /Retry-After \(2 s\)/);
  // Planned by the service's own clock 2 s after the 429 came back (the schedule alone: 300 ms).
  const answered = Date.parse(rec.at) + rec.duration_ms;
  t.true(due - answered >= 2000 && due - answered < 2500, `next attempt planned ${due - answered} ms after the 429`);
  await r.waitFor(2, 10_000);
  const gap = r.received[1]!.at - r.received[0]!.at;
  t.true(gap >= 2000, `second attempt ${gap} ms after the first (schedule alone: 300 ms)`);
  t.true(r.received[1]!.at >= due - 5, 'not before the recorded time');
  // Then made at that time, give or take this process's stalls under load (which delay the arrival it sees).
  t.true(r.received[1]!.at - due < 2500, `second attempt ${r.received[1]!.at - due} ms after its recorded time`);
});

test.serial('503 with Retry-After as an HTTP date: the next attempt is not before that date', async (t) => {
  let date = '';
  const r = await h.receiver((_req, n) => {
    if (n > 0) return 204;
    date = new Date(Date.now() + 3000).toUTCString(); // whole seconds: between 2 and 3 s from now
    return { status: 503, headers: { 'retry-after': date } };
  });
  const { endpoint } = await h.store.create('tenant_ra_date' as TenantId, { url: r.url, events: ['*'] });
  await publish('tenant_ra_date');
  await r.waitFor(2, 10_000);
  const at = Date.parse(date);
  t.true(r.received[1]!.at >= at, `second attempt ${at - r.received[1]!.at} ms before ${date}`);
  t.true(r.received[1]!.at - at < 1000);
  const [first] = await records(endpoint.id, webhookIdOf(r, 0));
  t.like(first, { status: 503, next_attempt_by: 'retry_after' });
  t.true(Math.abs(Date.parse(first!.next_attempt_at!) - at) < 50, 'the record shows the real next time');
});

test.serial('Retry-After shorter than the schedule: the schedule wins; every attempt counts, and max_retries still ends in a dead letter', async (t) => {
  // Always 429 with Retry-After 1 s: beats steps 1 and 2 (300, 600 ms), loses to step 3 (2.5 s).
  const r = await h.receiver(() => ({ status: 429, headers: { 'retry-after': '1' } }));
  const { endpoint } = await h.store.create('tenant_ra_short' as TenantId, { url: r.url, events: ['*'] });
  await publish('tenant_ra_short');
  await r.waitFor(4, 15_000);
  const at = r.received.map((x) => x.at);
  const gaps = [at[1]! - at[0]!, at[2]! - at[1]!, at[3]! - at[2]!];
  t.true(gaps[0]! >= 1000 && gaps[0]! < 1600, `retry 1 after ${gaps[0]} ms (Retry-After 1 s over the 300 ms step)`);
  t.true(gaps[1]! >= 1000 && gaps[1]! < 1600, `retry 2 after ${gaps[1]} ms (Retry-After 1 s over the 600 ms step)`);
  t.true(gaps[2]! >= 2400 && gaps[2]! < 3200, `retry 3 after ${gaps[2]} ms (the 2.5 s step over Retry-After 1 s)`);
  const webhookId = webhookIdOf(r, 0);
  const history = await eventually(async () => {
    const all = await records(endpoint.id, webhookId);
    return all.length === 4 ? all : undefined;
  }, 10_000, 'four attempt records');
  t.deepEqual(history.map((x) => x.attempt), [1, 2, 3, 4]);
  t.deepEqual(history.map((x) => x.next_attempt_by ?? 'schedule'), ['retry_after', 'retry_after', 'schedule', 'schedule']);
  t.is(history[3]!.next_attempt_at, null, 'the 4th attempt was the last');
  const shown = await eventually(async () => {
    const s = await admin.showDelivery({ webhook_id: webhookId, endpoint: endpoint.id });
    return s.state === 'dead' ? s : undefined;
  }, 15_000, 'the delivery to die');
  t.is(shown.attempts, 4);
  t.is(shown.last_status, 429);
  await new Promise((res) => setTimeout(res, 1000));
  t.is(r.received.length, 4, 'nothing after the dead letter');
});

test.serial('429s lower an endpoint\'s concurrency; 2xx answers raise it again', async (t) => {
  let throttleUntil = 0;
  let recoveredFrom = Infinity;
  const r = await h.receiver((req) => {
    if (req.at < throttleUntil) return { status: 429, delayMs: 100 };
    if (throttleUntil > 0 && recoveredFrom === Infinity) recoveredFrom = req.at;
    return { status: 200, delayMs: 200 };
  });
  await h.store.create('tenant_aimd' as TenantId, { url: r.url, events: ['*'] });
  // Before: a backlog runs MAX_IN_FLIGHT at once.
  await publish('tenant_aimd', 24);
  await r.waitFor(24, 20_000);
  const before = Math.max(...r.received.map((x) => x.concurrent));
  t.is(before, MAX_IN_FLIGHT, `at most ${before} at once before any 429`);
  await eventually(() => (r.received.every((x) => x.at + 200 < Date.now()) ? true : undefined), 5000, 'the first backlog to finish');

  // 429s for 2 s while a new backlog waits.
  const throttledFrom = Date.now();
  throttleUntil = throttledFrom + 2000;
  const seen = r.received.length;
  await publish('tenant_aimd', 24);
  await r.waitFor(seen + 24 + 3, 30_000);
  await eventually(() => (r.received.filter((x) => x.at >= throttleUntil).length >= 24 ? true : undefined), 30_000, 'the backlog to get through');
  // The 429s come in waves as the limit halves (8 at once, then 4, then 2): every attempt after those 14
  // runs alone.
  const throttled = r.received.slice(seen).filter((x) => x.at < throttleUntil);
  const during = throttled.slice(MAX_IN_FLIGHT + MAX_IN_FLIGHT / 2 + MAX_IN_FLIGHT / 4);
  t.log(r.received.slice(seen).map((x) => `${x.at - throttledFrom}:${x.concurrent}`).join(' '));
  t.true(during.length > 0, 'attempts went on during the 429s');
  const duringMax = Math.max(...during.map((x) => x.concurrent));
  t.true(duringMax <= 1, `at most ${duringMax} at once once the 429s had come back`);
  const after = r.received.filter((x) => x.at >= recoveredFrom);
  t.true(after[0]!.concurrent <= 2, `the first 2xx attempts run ${after[0]!.concurrent} at once`);
  const afterMax = Math.max(...after.map((x) => x.concurrent));
  t.true(afterMax >= 4, `concurrency grew back to ${afterMax} with 2xx answers`);
});

test.serial('a rate limit of 5 per second holds across two delivery instances; the backlog waits and nothing fails', async (t) => {
  const second = await startService(loadConfig({
    NATS_URL: h.nats.url, DATABASE_URL: h.db.url, OPS_PORT: '0', HOOKSTREAM_ROLES: 'delivery',
    HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1', HOOKSTREAM_DELIVERY_SHARDS: '2',
    HOOKSTREAM_RETRY_SCHEDULE: SCHEDULE.map((ms) => `${ms}ms`).join(','), HOOKSTREAM_ATTEMPT_TIMEOUT: '5s',
    HOOKSTREAM_MAX_IN_FLIGHT: String(MAX_IN_FLIGHT),
    // The first instance's partitions and direct delivery: both are fixed once set (TEST_DIRECT_DELIVERY=1).
    HOOKSTREAM_EVENT_PARTITIONS: String(h.config.eventPartitions), HOOKSTREAM_DIRECT_DELIVERY: h.config.directDelivery ? '1' : '0',
    HOOKSTREAM_MASTER_KEY: h.keys.masterKey, HOOKSTREAM_LOG_LEVEL: 'error',
  }), h.log);
  t.teardown(() => second.stop());
  const r = await h.receiver(() => 200);
  const { endpoint } = await h.store.create('tenant_rate' as TenantId, { url: r.url, events: ['*'], rate_limit: 5 });
  t.is(endpoint.rateLimit, 5);
  const tokens = await watchRateTokens(h.service.js, h.service.jsm, endpoint.id, 5);
  t.teardown(() => tokens.stop());
  // Both instances run a pull loop on the endpoint's consumer before the backlog arrives.
  await eventually(() => second.directory?.get(endpoint.id as EndpointId) ? true : undefined, 10_000, 'the second instance to see the endpoint');
  await new Promise((res) => setTimeout(res, 500));
  const started = Date.now();
  await publish('tenant_rate', 30);
  await eventually(() => (new Set(r.received.map((x) => x.headers['webhook-id'])).size === 30 ? true : undefined), 30_000,
    'the 30 deliveries');
  const elapsed = Date.now() - started;
  // Every delivery acknowledged: the work queue holds none of them.
  await eventually(async () => ((await queuedDeliveries(h, endpoint.id)) === 0 ? true : undefined), 10_000, 'an empty work queue');
  // At least once: a process stalled past the 300 ms ack wait (a loaded machine) has the deliveries waiting
  // for a token handed out again, to either instance, under their webhook-ids (once 5 of 30). Not every one
  // twice; and no failure, so no retry (below).
  t.true(r.received.length - 30 < 15, `${r.received.length - 30} repeated deliveries of 30`);
  // Every attempt went out on a token, and the tokens (stamped by the server, not by this process, whose
  // stalls bunch the arrivals its receiver sees) hold the limit across both instances.
  await tokens.waitFor(r.received.length);
  const worst = tokens.worstWindow(1000);
  t.true(worst <= 5, `${worst} attempts started within one second`);
  t.true(elapsed >= 5000, `30 deliveries at 5/s took ${elapsed} ms`);
  const failed = await h.service.jsm.streams.info(ATTEMPTS_STREAM, { subjects_filter: `attempts.${endpoint.id}.>` });
  t.deepEqual(failed.state.subjects ?? {}, {}, 'no failed attempt recorded');
  // A limit of 5 takes its tokens from the buckets of 4 and 1: no stream of its own.
  const tokenStreams: string[] = [];
  for await (const si of h.service.jsm.streams.list('rate_limit.>')) tokenStreams.push(si.config.name);
  t.deepEqual(tokenStreams.sort(), ['RATE_LIMIT_1', 'RATE_LIMIT_4']);
});

test('a rate limit is split into power-of-two buckets that add up to it', (t) => {
  t.deepEqual(rateBuckets(1), [1]);
  t.deepEqual(rateBuckets(5), [4, 1]);
  t.deepEqual(rateBuckets(1000), [512, 256, 128, 64, 32, 8]);
  t.deepEqual(rateBuckets(8192), [8192]);
  for (let n = 1; n <= 10_000; n++) {
    const b = rateBuckets(n);
    if (b.reduce((x, y) => x + y, 0) !== n || b.some((x) => (x & (x - 1)) !== 0)) return t.fail(`buckets of ${n}: ${b.join(',')}`);
  }
  t.false(isRetiredRateLimitStream('RATE_LIMIT_64'));
  t.true(isRetiredRateLimitStream('RATE_LIMIT_5'));
  t.false(isRetiredRateLimitStream('DELIVERIES_5'));
});
