// /healthz, /readyz and /metrics on the ops listener (OPS_HOST:OPS_PORT, never the API port): Prometheus counters that move as deliveries happen,
// backlog per endpoint from JetStream, and readiness that names what is missing.
import test from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { createTestDatabase } from './helpers/database.ts';
import type { AdminClient } from '../src/admin/client.ts';
import { createReadiness } from '../src/ops/readiness.ts';
import { startOpsServer } from '../src/ops/server.ts';
import { openDatabase, closeDatabase } from '../src/db/orm.ts';
import { Metrics } from '../src/metrics.ts';
import type { TenantId } from '../src/domain/ids.ts';

let h: TestService;
let admin: AdminClient;

type Sample = { name: string; labels: Record<string, string>; value: number };

function parse(text: string): Sample[] {
  return text.split('\n').filter((l) => l && !l.startsWith('#')).map((line) => {
    const m = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line);
    if (!m) throw new Error(`not a Prometheus sample: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, k, v] of (m[2] ?? '').matchAll(/([a-z_]+)="((?:[^"\\]|\\.)*)"/g)) labels[k!] = v!;
    return { name: m[1]!, labels, value: Number(m[3]) };
  });
}

async function scrape(): Promise<(name: string, labels?: Record<string, string>) => number> {
  const res = await fetch(`${h.service.opsUrl}/metrics`);
  if (res.status !== 200) throw new Error(`GET /metrics answered ${res.status}`);
  if (!res.headers.get('content-type')?.startsWith('text/plain; version=0.0.4')) throw new Error('not the Prometheus text format');
  const samples = parse(await res.text());
  return (name, labels = {}) => samples
    .filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))
    .reduce((n, s) => n + s.value, 0);
}

test.before(async () => {
  h = await startTestService('metrics', { HOOKSTREAM_RETRY_SCHEDULE: '300ms,600ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '20s' });
  ({ admin } = await h.operator());
});

test.after.always(() => h?.closeAll());

test('healthz and readyz answer on the ops listener, and not on the API port', async (t) => {
  for (const path of ['/healthz', '/readyz', '/metrics']) t.is((await fetch(`${h.service.api!.url}${path}`)).status, 404, path);
  const health = await fetch(`${h.service.opsUrl}/healthz`);
  t.is(health.status, 200);
  t.deepEqual(await health.json(), { status: 'ok' });
  const ready = await fetch(`${h.service.opsUrl}/readyz`);
  t.is(ready.status, 200);
  const body = await ready.json() as { status: string; checks: { name: string; ok: boolean }[] };
  t.is(body.status, 'ready');
  t.deepEqual(body.checks.map((c) => [c.name, c.ok]), [['nats', true], ['streams', true], ['postgres', true], ['projection', true], ['directory', true], ['router', true], ['roles', true]]);
});

test.serial('counters move as events are received, rejected, delivered, failed, dead and replayed', async (t) => {
  const before = await scrape();
  let healthy = false;
  const ok = await h.receiver(() => 200);
  const failing = await h.receiver(() => (healthy ? 200 : 500));
  await h.store.create('tenant_m_ok' as TenantId, { url: ok.url, events: ['user.*'] });
  const { endpoint } = await h.store.create('tenant_m_bad' as TenantId, { url: failing.url, events: ['organization.*'] });
  await h.publish('tenant_m_ok', 'user.created', { userId: 'user_1' });
  await h.publish('tenant_m_ok', 'user.created', { userId: 'user_2' });
  await h.publish('tenant_m_ok', 'user.exploded', { userId: 'user_3' });
  await h.publish('tenant_m_bad', 'organization.updated', { organizationId: 'org_1' });
  await ok.waitFor(2);
  const [letter] = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint: endpoint.id });
    return page.data.length ? page.data : undefined;
  }, 20_000, 'dead letter');

  const after = await eventually(async () => {
    const m = await scrape();
    return m('hookstream_dead_letters_stored_total') > before('hookstream_dead_letters_stored_total') ? m : undefined;
  }, 10_000, 'dead letter counted');
  const moved = (name: string, labels?: Record<string, string>) => after(name, labels) - before(name, labels);
  t.is(moved('hookstream_events_received_total'), 4);
  t.is(moved('hookstream_events_rejected_total', { reason: 'unknown_event' }), 1);
  t.is(moved('hookstream_deliveries_enqueued_total'), 3);
  t.is(moved('hookstream_delivery_attempts_total', { event: 'user.created' }), 2);
  t.is(moved('hookstream_deliveries_acknowledged_total', { event: 'user.created' }), 2);
  t.is(moved('hookstream_delivery_attempts_total', { event: 'organization.updated' }), 3);
  t.is(moved('hookstream_delivery_attempts_failed_total', { event: 'organization.updated', kind: 'status' }), 3);
  t.is(moved('hookstream_deliveries_dead_total', { event: 'organization.updated' }), 1);
  t.is(moved('hookstream_dead_letters_stored_total'), 1);
  t.is(moved('hookstream_attempt_duration_seconds_count'), 5);

  healthy = true;
  await admin.replayDeadLetter({ id: letter!.id });
  await failing.waitFor(4);
  const replayed = await eventually(async () => {
    const m = await scrape();
    return m('hookstream_deliveries_acknowledged_total', { event: 'organization.updated' }) > before('hookstream_deliveries_acknowledged_total', { event: 'organization.updated' }) ? m : undefined;
  }, 10_000, 'replay acknowledged');
  t.is(replayed('hookstream_dead_letters_replayed_total') - before('hookstream_dead_letters_replayed_total'), 1);
});

test('backlog per endpoint: pending and ack-pending from JetStream', async (t) => {
  // The endpoint holds its in-flight slots (HOOKSTREAM_MAX_IN_FLIGHT, 16) with hanging attempts; the rest wait.
  const hanging = await h.receiver(() => 'hang');
  const { endpoint } = await h.store.create('tenant_m_backlog' as TenantId, { url: hanging.url, events: ['user.updated'] });
  for (let i = 0; i < 20; i++) await h.publish('tenant_m_backlog', 'user.updated', { userId: `user_${i}` });
  await hanging.waitFor(16);
  // Until the first attempts time out (20 s), 4 wait and 16 are in flight; on a loaded machine the gauges
  // may first be read after that, when timed-out attempts wait for their retry and still count as
  // ack-pending. Either way all 20 are in the backlog and at least the 16 in-flight slots are ack-pending.
  const m = await eventually(async () => {
    const s = await scrape();
    const pending = s('hookstream_endpoint_backlog_pending', { endpoint: endpoint.id });
    const ackPending = s('hookstream_endpoint_backlog_ack_pending', { endpoint: endpoint.id });
    return pending + ackPending === 20 && ackPending >= 16 ? s : undefined;
  }, 60_000, 'backlog gauges');
  t.true(m('hookstream_endpoint_backlog_pending', { endpoint: endpoint.id }) <= 4);
  t.is(m('hookstream_endpoint_backlog_stale'), 0);
});

test('readiness names a missing stream, a lagging projection and an unreachable database', async (t) => {
  const missingShard = createReadiness({ nc: h.service.nc, jsm: h.service.jsm, orm: undefined, shards: 3, checkProjection: false });
  const r1 = await missingShard();
  t.false(r1.ready);
  t.deepEqual(r1.checks.find((c) => c.name === 'streams'), { name: 'streams', ok: false, detail: 'missing DELIVERIES_2' });

  // A database whose projection never ran: every endpoint event is unapplied.
  await h.store.create('tenant_m_lag' as TenantId, { url: 'https://example.com/x', events: ['*'] });
  const other = await createTestDatabase('metrics_lag');
  const orm = await openDatabase(other.url, h.log);
  try {
    const lagging = createReadiness({ nc: h.service.nc, jsm: h.service.jsm, orm, shards: 2, checkProjection: true, projectionLagMs: 0 });
    const r2 = await lagging();
    t.false(r2.ready);
    const projection = r2.checks.find((c) => c.name === 'projection')!;
    t.false(projection.ok);
    t.regex(projection.detail!, /endpoint event\(s\) unapplied/);
    await other.drop();
    const r3 = await lagging();
    t.false(r3.checks.find((c) => c.name === 'postgres')!.ok);
  } finally {
    await closeDatabase(orm).catch(() => {});
    await other.drop().catch(() => {});
  }
});

test('a process without the api role serves the same paths on its own server', async (t) => {
  const server = await startOpsServer(h.service.ops, { host: '127.0.0.1', port: 0, log: h.log });
  try {
    t.is((await fetch(`${server.url}/healthz`)).status, 200);
    t.is((await fetch(`${server.url}/readyz`)).status, 200);
    const metrics = await fetch(`${server.url}/metrics`);
    t.is(metrics.status, 200);
    t.regex(await metrics.text(), /^# HELP hookstream_events_received_total /m);
    t.is((await fetch(`${server.url}/v1/webhooks`)).status, 404);
    t.is((await fetch(`${server.url}/metrics`, { method: 'POST' })).status, 405);
  } finally {
    await server.close();
  }
});

test('a counter\'s series counts with the same labels as inc(labels), and shows from its first count', (t) => {
  const registry = new Metrics();
  const c = registry.counter('x_total', 'x');
  const ok = c.series({ event: 'user.created' });
  t.notRegex(registry.render(), /x_total\{/, 'no series before its first count');
  ok.inc();
  c.inc({ event: 'user.created' });
  ok.inc(2);
  t.is(c.get({ event: 'user.created' }), 4);
  t.is(parse(registry.render()).find((s) => s.name === 'x_total')?.value, 4);
});
