// Restarts lose and double nothing: the service mid-stream, and the NATS server itself.
import test from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import type { TenantId } from '../src/domain/ids.ts';

let h: TestService;
let r: Receiver;
const logged: { msg: string; away_ms?: number }[] = [];

test.before(async () => {
  h = await startTestService('restart', { HOOKSTREAM_RETRY_SCHEDULE: '500ms,1s,2s,4s,8s', HOOKSTREAM_LOG_LEVEL: 'info' }, {
    logWrite: (line) => logged.push(JSON.parse(line) as { msg: string }),
  });
  r = await h.receiver();
});
test.after.always(() => h?.closeAll());

/**
 * What arrived since `from` of one test's events only: a delivery of the test before may still come, late
 * (at least once: after the NATS restart, one of the first test's came again in CI).
 */
const since = (from: number, type: string) => r.received.slice(from).filter((g) => String(JSON.parse(g.body).type).startsWith(type));
const uniqueIds = (from: number, type = 'user.') => new Set(since(from, type).map((g) => String(g.headers['webhook-id'])));

test.serial('service restarts in the middle of a burst lose, delay and double nothing', async (t) => {
  const tenant = 'tenant_restart' as TenantId;
  await h.store.create(tenant, { url: r.url, events: ['user.*'] });
  const total = 300;
  const from = r.received.length;
  const publishes: Promise<unknown>[] = [];
  for (let i = 0; i < total; i++) {
    publishes.push(h.publish(tenant, 'user.updated', { userId: `user_${i}` }));
    // Three times, while the router still holds events just stored: router, delivery and projector stop
    // mid-stream and start again on the same streams. (Each restart used to leave an event in flight about
    // half the time: either the events waiting for the drain records' read, or one handed back to the
    // stopped router's own pull.)
    if (i % 100 === 60) {
      await Promise.all(publishes);
      await h.restart();
    }
  }
  await Promise.all(publishes.splice(0));
  // Within 25 s: an event a stopping router left in flight would come back only after EVENTS' 30 s ack wait.
  await eventually(() => (uniqueIds(from).size >= total ? true : undefined), 25_000, 'every event delivered before the ack wait');
  await new Promise((res) => setTimeout(res, 1000));
  const bodies = r.received.slice(from).map((g) => JSON.parse(g.body).data.userId as string);
  t.is(new Set(bodies).size, total, 'every event arrived');
  t.is(r.received.length - from, total, 'none arrived twice');
  // A stop cuts no write short and fails no read of its own: nothing for an operator to chase.
  const stopNoise = /drain records|could not write/;
  t.deepEqual(logged.filter((l) => stopNoise.test(l.msg)).map((l) => l.msg), []);
});

test.serial('a NATS server restart loses nothing: the service reconnects and goes on', async (t) => {
  const tenant = 'tenant_nats_restart' as TenantId;
  await h.store.create(tenant, { url: r.url, events: ['organization.*'] });
  const from = r.received.length;
  for (let i = 0; i < 50; i++) await h.publish(tenant, 'organization.updated', { n: i });
  await h.nats.stop();
  await h.nats.start();
  // Publishing works again once the client has reconnected.
  for (let i = 50; i < 100; i++) {
    await eventually(async () => {
      try {
        await h.publish(tenant, 'organization.updated', { n: i });
        return true;
      } catch {
        return undefined;
      }
    }, 30_000, 'publish after NATS restart');
  }
  await eventually(() => (uniqueIds(from, 'organization.').size >= 100 ? true : undefined), 60_000, 'every event delivered after NATS restart');
  const ns = new Set(since(from, 'organization.').map((g) => JSON.parse(g.body).data.n as number));
  t.is(ns.size, 100);
  // The operator sees it in the log: one line when NATS went away, one when it was back.
  t.is(logged.filter((l) => l.msg === 'lost the connection to NATS; reconnecting').length, 1);
  const back = logged.filter((l) => l.msg === 'reconnected to NATS');
  t.is(back.length, 1);
  t.true((back[0]?.away_ms ?? -1) >= 0);
});
