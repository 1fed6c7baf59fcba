// Which roles `serve` runs in the API's thread, and the ops answers of a process in two threads: one
// exposition with each family and series once (the threads' counts added up), one readiness covering both.
import test from 'ava';
import { ROLES } from '../src/config.ts';
import { combineOps, mergeExpositions } from '../src/ops/combined.ts';
import { createOps, type Ops } from '../src/ops/ops.ts';
import { createServiceMetrics } from '../src/metrics.ts';
import { splitRoles } from '../src/supervisor/threads.ts';

test('every role (npm start): api, console and the endpoint projection in the thread, the delivery path in the main one', (t) => {
  t.deepEqual(splitRoles([...ROLES], true), {
    api: ['api', 'console', 'projector'],
    work: ['router', 'delivery', 'deadletter', 'admin', 'projector'],
  });
});

test('one thread: switched off, or roles of one side only (the processes an operator split)', (t) => {
  t.is(splitRoles([...ROLES], false), undefined);
  t.is(splitRoles(['api', 'projector'], true), undefined);
  t.is(splitRoles(['api', 'projector', 'console'], true), undefined);
  t.is(splitRoles(['router', 'delivery', 'deadletter', 'admin', 'projector'], true), undefined);
  t.deepEqual(splitRoles(['api', 'delivery'], true), { api: ['api'], work: ['delivery'] });
});

test('the exposition of two threads: each family once, equal series added up, the others kept', (t) => {
  const main = createServiceMetrics();
  const api = createServiceMetrics();
  main.unhandledErrors.inc({ kind: 'rejection' });
  api.unhandledErrors.inc({ kind: 'rejection' }, 2);
  api.authThrottled.inc({ surface: 'api' }, 5);
  main.attemptSeconds.observe(0.02);
  api.attemptSeconds.observe(0.02);
  main.backlogPending.set(7, { endpoint: 'ep_1' });
  const merged = mergeExpositions([main.registry.render(), api.registry.render()]);
  const types = merged.split('\n').filter((l) => l.startsWith('# TYPE '));
  t.is(new Set(types).size, types.length, 'no family twice');
  t.is(types.length, main.registry.render().split('\n').filter((l) => l.startsWith('# TYPE ')).length);
  const samples = merged.split('\n').filter((l) => l !== '' && !l.startsWith('#')).map((l) => l.slice(0, l.lastIndexOf(' ')));
  t.is(new Set(samples).size, samples.length, 'no series twice');
  t.true(merged.includes('hookstream_unhandled_errors_total{kind="rejection"} 3\n'));
  t.true(merged.includes('hookstream_auth_throttled_total{surface="api"} 5\n'));
  t.true(merged.includes('hookstream_attempt_duration_seconds_count 2\n'));
  t.true(merged.includes('hookstream_attempt_duration_seconds_bucket{le="0.025"} 2\n'));
  t.true(merged.includes('hookstream_endpoint_backlog_pending{endpoint="ep_1"} 7\n'));
  // Each family's samples under its own HELP and TYPE.
  const at = merged.indexOf('# TYPE hookstream_auth_throttled_total');
  t.true(at >= 0 && merged.indexOf('hookstream_auth_throttled_total{surface="api"}') > at);
});

const readyOps = (checks: { name: string; ok: boolean; detail?: string }[]): Ops => ({
  handle: async (path) => (path === '/readyz'
    ? { status: checks.every((c) => c.ok) ? 200 : 503, contentType: 'application/json', body: JSON.stringify({ status: 'x', checks }) }
    : path === '/healthz' ? { status: 200, contentType: 'application/json', body: '{"status":"ok"}' } : undefined),
});

test('readiness of two threads: ready when both are, each check once, a failing one named by its thread', async (t) => {
  const both = combineOps([
    { ops: readyOps([{ name: 'nats', ok: true }, { name: 'directory', ok: true }]) },
    { name: 'api thread', ops: readyOps([{ name: 'nats', ok: true }, { name: 'projection', ok: true }]) },
  ]);
  const ok = await both.handle('/readyz');
  t.is(ok?.status, 200);
  t.deepEqual(JSON.parse(ok!.body).checks.map((c: { name: string }) => c.name), ['nats', 'directory', 'projection']);

  const lagging = combineOps([
    { ops: readyOps([{ name: 'nats', ok: true }]) },
    { name: 'api thread', ops: readyOps([{ name: 'nats', ok: true }, { name: 'projection', ok: false, detail: '3 endpoint event(s) unapplied' }]) },
  ]);
  const notReady = await lagging.handle('/readyz');
  t.is(notReady?.status, 503);
  t.deepEqual(JSON.parse(notReady!.body).checks.find((c: { name: string }) => c.name === 'projection'), { name: 'projection', ok: false, detail: 'api thread: 3 endpoint event(s) unapplied' });
});

test('a thread that does not answer: not ready and not healthy, naming it; /metrics still renders the other', async (t) => {
  const metrics = createServiceMetrics();
  metrics.roleRestarts.inc({ role: 'router' });
  const main = createOps({ metrics, backlog: { refresh: async () => {} }, readiness: async () => ({ ready: true, checks: [{ name: 'nats', ok: true }] }) });
  const silent: Ops = { handle: () => Promise.reject(new Error('api thread did not answer within 3000 ms')) };
  const both = combineOps([{ ops: main }, { name: 'api thread', ops: silent }]);
  const ready = await both.handle('/readyz');
  t.is(ready?.status, 503);
  t.regex(ready!.body, /api thread: api thread did not answer/);
  const health = await both.handle('/healthz');
  t.is(health?.status, 503);
  t.regex(health!.body, /api thread/);
  const text = (await both.handle('/metrics'))!.body;
  t.true(text.includes('hookstream_role_restarts_total{role="router"} 1\n'));
  t.is(await both.handle('/nope'), undefined);
});
