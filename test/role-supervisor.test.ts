// The role supervisor: a role whose loop fails is started again with backoff and counted, readiness sees it
// down meanwhile, another role goes on untouched, and stop() ends the role that runs.
import test from 'ava';
import { createRoleSupervisor } from '../src/supervisor/roles.ts';
import { createServiceMetrics } from '../src/metrics.ts';
import { createLogger } from '../src/log.ts';
import { eventually } from './helpers/service.ts';

interface FakeRole { stop(): Promise<void>; done: Promise<void>; fail(e: Error): void; stopped: boolean }

function fakeRole(): FakeRole {
  let fail: (e: Error) => void = () => {};
  let end: () => void = () => {};
  const done = new Promise<void>((resolve, reject) => { end = resolve; fail = reject; });
  const role: FakeRole = { done, fail, stopped: false, async stop() { role.stopped = true; end(); } };
  return role;
}

test('a role whose loop fails is started again, counted, and named while down; the others go on', async (t) => {
  const metrics = createServiceMetrics();
  const lines: string[] = [];
  const log = createLogger({ write: (l) => lines.push(l) });
  const supervisor = createRoleSupervisor({ log, restarts: metrics.roleRestarts, firstDelayMs: 200 });
  const started: FakeRole[] = [];
  const router = await supervisor.supervise('router', async () => { const r = fakeRole(); started.push(r); return r; });
  const other = fakeRole();
  const handler = await supervisor.supervise('deadletter', async () => other);

  started[0]!.fail(new Error('boom'));
  await eventually(() => (supervisor.down().includes('router') ? true : undefined), 5000, 'router down');
  t.deepEqual(supervisor.down(), ['router']);
  await eventually(() => (started.length === 2 && supervisor.down().length === 0 ? true : undefined), 5000, 'router started again');
  t.true(started[0]!.stopped, 'the failed instance was stopped');
  t.is(metrics.roleRestarts.get({ role: 'router' }), 1);
  t.false(other.stopped, 'the other role was left alone');
  t.true(lines.some((l) => l.includes('role stopped on its own') && l.includes('boom')));

  // A loop that simply ends is a failure too.
  void started[1]!.stop();
  await eventually(() => (started.length === 3 ? true : undefined), 5000, 'started a third time');
  t.is(metrics.roleRestarts.get({ role: 'router' }), 2);

  await router.stop();
  await handler.stop();
  t.true(started[2]!.stopped);
  t.true(other.stopped);
  await new Promise((r) => setTimeout(r, 500));
  t.is(started.length, 3, 'not started again after stop()');
});

test('a role that cannot start again is retried until it can, and stop() ends the retries', async (t) => {
  const metrics = createServiceMetrics();
  const supervisor = createRoleSupervisor({ log: createLogger({ write: () => {} }), restarts: metrics.roleRestarts, firstDelayMs: 50, maxDelayMs: 100 });
  let attempts = 0;
  const first = fakeRole();
  const role = await supervisor.supervise('projector', async () => {
    attempts++;
    if (attempts === 1) return first;
    throw new Error('NATS is away');
  });
  first.fail(new Error('loop failed'));
  await eventually(() => (attempts >= 4 ? true : undefined), 5000, 'several tries');
  t.deepEqual(supervisor.down(), ['projector']);
  await role.stop();
  const after = attempts;
  await new Promise((r) => setTimeout(r, 400));
  t.is(attempts, after, 'no try after stop()');
  t.deepEqual(supervisor.down(), []);
});
