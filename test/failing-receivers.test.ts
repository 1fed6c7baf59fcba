// Failing receivers (issue 17), at their real length, with real NATS, Postgres and HTTP receivers: a
// failed delivery waits for its retry without taking a new delivery's place, a failing endpoint is probed
// one attempt at a time, recovery is prompt, operators can bring waiting retries forward, and a slow
// rate-limited endpoint holds no more deliveries in the process than its lanes.
// Serial: each test reads its endpoint's timing, and they share one service.
import test from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { startReceiver, type Receiver, type Received } from './helpers/receiver.ts';
import { watchRateTokens } from './helpers/rate-tokens.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { TenantId } from '../src/domain/ids.ts';

// Long steps after the first: a retry that blocked new deliveries would show as a 30 s wait.
const SCHEDULE = '1s,30s,30s,30s';
const MAX_IN_FLIGHT = 16;

let h: TestService;
let admin: AdminClient;

test.before(async () => {
  h = await startTestService('failing_receivers', {
    HOOKSTREAM_RETRY_SCHEDULE: SCHEDULE, HOOKSTREAM_ATTEMPT_TIMEOUT: '5s', HOOKSTREAM_MAX_IN_FLIGHT: String(MAX_IN_FLIGHT),
  });
  ({ admin } = await h.operator({ timeoutMs: 20_000 }));
});

test.after.always(() => h?.closeAll());

const typeOf = (r: Received) => (JSON.parse(r.body) as { type: string }).type;
const idOf = (r: Received) => String(r.headers['webhook-id']);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function metric(name: string): Promise<number> {
  const text = await (await fetch(`${h.service.opsUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : 0;
}

test.serial('one event type rejected: the other types to the same endpoint go through at once', async (t) => {
  const r = await h.receiver((req) => (typeOf(req) === 'user.deleted' ? 500 : 200));
  const { endpoint } = await h.store.create('tenant_one_type' as TenantId, { url: r.url, events: ['*'] });
  // Its user.deleted keep failing: deleted at the end, so that the next tests count only their own endpoint.
  t.teardown(() => h.store.delete('tenant_one_type' as TenantId, endpoint.id).then(() => {}));
  for (let i = 0; i < 20; i++) await h.publish('tenant_one_type', 'user.deleted', { userId: `user_${i}` });
  const before = Date.now();
  for (let i = 0; i < 10; i++) await h.publish('tenant_one_type', 'user.updated', { userId: `user_${i}` });
  await eventually(() => (r.received.filter((x) => typeOf(x) === 'user.updated').length === 10 ? true : undefined), 15_000,
    'the ten user.updated (the failing ones\' next step is 30 s away)');
  const updated = r.received.filter((x) => typeOf(x) === 'user.updated');
  const last = Math.max(...updated.map((x) => x.at)) - before;
  t.log(`the last user.updated arrived ${last} ms after it was published`);
  t.true(last < 10_000, `user.updated waited ${last} ms`);
  // Every user.deleted had its first attempt, and they are still retrying (not dead, not acknowledged).
  const deleted = new Set(r.received.filter((x) => typeOf(x) === 'user.deleted').map(idOf));
  t.is(deleted.size, 20);
  t.is(new Set(updated.map(idOf)).size, 10, 'each user.updated once');
});

test.serial('a receiver down longer than a retry step: probed one at a time, then new events within seconds of its recovery', async (t) => {
  // Answers 503 after 200 ms while "down", so that the concurrency it sees is measurable.
  let down = true;
  const r = await h.receiver(() => (down ? { status: 503, delayMs: 200 } : 200));
  // The previous test's endpoint, deleted in its teardown, leaves the gauge within its 500 ms refresh.
  const probingBefore = await eventually(async () => {
    const n = await metric('hookstream_endpoints_probing');
    return n === 0 ? n : undefined;
  }, 5000, 'the previous endpoint to leave the probing gauge');
  const { endpoint } = await h.store.create('tenant_outage' as TenantId, { url: r.url, events: ['*'] });
  // Two events a second for 12 s while it fails: longer than the first retry step (1 s), and more failed
  // deliveries than the endpoint has lanes (16).
  for (let i = 0; i < 24; i++) {
    await h.publish('tenant_outage', 'user.updated', { userId: `user_${i}` });
    await sleep(500);
  }
  t.is(await metric('hookstream_endpoints_probing'), probingBefore + 1, 'the endpoint is probed one attempt at a time');
  // Once PROBE_AFTER (3) attempts have failed in a row, never more than one attempt at once.
  const thirdFailure = r.received[2]!.at + 200;
  const later = r.received.filter((x) => x.at > thirdFailure + 50);
  t.true(later.length > 0);
  t.is(Math.max(...later.map((x) => x.concurrent)), 1, 'one attempt at a time while failing');

  down = false;
  const recovered = Date.now();
  const seen = r.received.length;
  await h.publish('tenant_outage', 'organization.updated', { organizationId: 'org_1' });
  const fresh = await eventually(() => r.received.slice(seen).find((x) => typeOf(x) === 'organization.updated'), 10_000,
    'the event published after the recovery');
  t.log(`new event delivered ${fresh.at - recovered} ms after the recovery`);
  t.true(fresh.at - recovered < 5000);
  // The failed ones come back on their schedule (30 s steps) or with retry-now: bring them forward.
  const { brought_forward: n } = await admin.retryNow({ endpoint: endpoint.id });
  t.true(n >= 1, `${n} waiting retries brought forward`);
  await eventually(() => {
    const ok = new Set(r.received.filter((x) => x.at >= recovered && typeOf(x) === 'user.updated').map(idOf));
    return ok.size === 24 ? true : undefined;
  }, 15_000, 'every event of the outage, after retry-now');
  await eventually(async () => ((await metric('hookstream_endpoints_probing')) === probingBefore ? true : undefined), 2000, 'the first 2xx to end the probing');
});

test.serial('retry-now brings waiting retries forward; each then counts as its next attempt', async (t) => {
  let failing = true;
  const r = await h.receiver(() => (failing ? 500 : 200));
  const { endpoint } = await h.store.create('tenant_retry_now' as TenantId, { url: r.url, events: ['*'] });
  for (let i = 0; i < 5; i++) await h.publish('tenant_retry_now', 'user.created', { userId: `user_${i}` });
  // Attempts 1 and 2 (1 s apart) fail; attempt 3 is 30 s after attempt 2.
  await r.waitFor(10, 15_000);
  const ids = [...new Set(r.received.map(idOf))];
  t.is(ids.length, 5);
  await sleep(500);
  failing = false;
  const asked = Date.now();
  const out = await admin.retryNow({ endpoint: endpoint.id });
  t.like(out, { endpoint_id: endpoint.id, brought_forward: 5, instances: 1 });
  await r.waitFor(15, 10_000);
  t.true(r.received[14]!.at - asked < 5000, 'attempted within seconds, not at the 30 s step');
  const shown = await eventually(async () => {
    const s = await admin.showDelivery({ webhook_id: ids[0]!, endpoint: endpoint.id });
    return s.state === 'acknowledged' ? s : undefined;
  }, 10_000, 'the delivery to be acknowledged');
  t.is(shown.attempts, 3, 'two failed attempts and the one brought forward');
  // Nothing is waiting any more: a second retry-now brings nothing.
  t.like(await admin.retryNow({ endpoint: endpoint.id }), { brought_forward: 0 });
});

test.serial('retry-now refuses what is not an endpoint id', async (t) => {
  const e = await t.throwsAsync(admin.retryNow({ endpoint: 'deliveries.>' }));
  t.regex(e!.message, /endpoint must be an endpoint id/);
});

test.serial('a rate-limited endpoint rejecting one event type: the rate holds and the other types are not held back', async (t) => {
  const r = await h.receiver((req) => (typeOf(req) === 'user.deleted' ? 500 : 200));
  const { endpoint } = await h.store.create('tenant_rate_fail' as TenantId, { url: r.url, events: ['*'], rate_limit: 5 });
  t.teardown(() => h.store.delete('tenant_rate_fail' as TenantId, endpoint.id).then(() => {}));
  const tokens = await watchRateTokens(h.service.js, h.service.jsm, endpoint.id, 5);
  t.teardown(() => tokens.stop());
  for (let i = 0; i < 10; i++) await h.publish('tenant_rate_fail', 'user.deleted', { userId: `user_${i}` });
  for (let i = 0; i < 10; i++) await h.publish('tenant_rate_fail', 'user.updated', { userId: `user_${i}` });
  // 20 first attempts at 5 a second, then the user.deleted retries (1 s step) share the rate: well under 30 s,
  // the step the failed ones wait after their second attempt (a slot held through it would block everything).
  await eventually(() => (r.received.filter((x) => typeOf(x) === 'user.updated').length === 10 ? true : undefined), 15_000,
    'the ten user.updated behind ten failing user.deleted');
  // Every attempt went out on a token, and the tokens (stamped by the server, not by this process, whose
  // stalls bunch the arrivals its receiver sees) hold the limit.
  await tokens.waitFor(r.received.length);
  const worst = tokens.worstWindow(1000);
  t.true(worst <= 5, `${worst} attempts started within one second (limit 5)`);
});

test.serial('a slow rate-limited endpoint: the process holds at most its lanes; the rest waits in the stream', async (t) => {
  const r = await h.receiver(() => ({ status: 200, delayMs: 3000 }));
  await h.store.create('tenant_slow_rate' as TenantId, { url: r.url, events: ['*'], rate_limit: 500 });
  await Promise.all(Array.from({ length: 200 }, (_, i) => h.publish('tenant_slow_rate', 'user.updated', { userId: `user_${i}` })));
  await r.waitFor(MAX_IN_FLIGHT, 10_000);
  let held = 0;
  for (let i = 0; i < 8; i++) {
    await sleep(600);
    held = Math.max(held, await metric('hookstream_delivery_messages_held'));
  }
  t.log(`held at most ${held} deliveries with ${r.received.length} attempts made`);
  t.true(held > 0);
  t.true(held <= MAX_IN_FLIGHT, `${held} deliveries held in the process (lanes: ${MAX_IN_FLIGHT})`);
  t.true(Math.max(...r.received.map((x) => x.concurrent)) <= MAX_IN_FLIGHT);
});

test.serial('a receiver brought back on its port after being unreachable gets the new events at once', async (t) => {
  // Really down: nothing listens on the port (connections refused), for longer than the first step.
  let r: Receiver = await startReceiver(() => 200);
  const url = r.url;
  const port = Number(new URL(url).port);
  await r.close();
  await h.store.create('tenant_refused' as TenantId, { url, events: ['*'] });
  for (let i = 0; i < 5; i++) {
    await h.publish('tenant_refused', 'user.updated', { userId: `user_${i}` });
    await sleep(800);
  }
  r = await startReceiver(() => 200, { port });
  t.teardown(() => r.close());
  const back = Date.now();
  await h.publish('tenant_refused', 'user.created', { userId: 'user_new' });
  const fresh = await eventually(() => r.received.find((x) => typeOf(x) === 'user.created'), 10_000, 'the new event');
  t.true(fresh.at - back < 5000, `new event after ${fresh.at - back} ms`);
});
