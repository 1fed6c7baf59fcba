// A tenant's endpoints on one host pull about what its sockets to that host can send (pull-loop.ts): the
// rest of their deliveries wait in their consumers at the server, not in the process, where each would be
// kept from redelivery by a keep-alive every few seconds. Real NATS, Postgres and a loopback receiver.
import test from 'ava';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { CONNECTIONS_PER_ORIGIN } from '../src/delivery/http-sender.ts';
import type { TenantId } from '../src/domain/ids.ts';

const MAX_IN_FLIGHT = 16;
let h: TestService;

test.before(async () => {
  // A first retry step shorter than an attempt: held deliveries must be kept alive while they wait.
  h = await startTestService('socket_pool_pulls', { HOOKSTREAM_RETRY_SCHEDULE: '1s,30s', HOOKSTREAM_MAX_IN_FLIGHT: String(MAX_IN_FLIGHT) });
});

test.after.always(() => h?.closeAll());

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function metric(name: string): Promise<number> {
  const text = await (await fetch(`${h.service.opsUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${name} `));
  return line ? Number(line.split(' ')[1]) : 0;
}

test("a tenant's endpoints on one slow host hold about its sockets to the host, not all their lanes", async (t) => {
  // 20 endpoints × 16 lanes = 320 attempts at once, for the tenant's 128 sockets to the host.
  const ENDPOINTS = 20;
  const EVENTS = 30;
  const r = await h.receiver(() => ({ status: 200, delayMs: 2000 }));
  for (let i = 0; i < ENDPOINTS; i++) await h.store.create('tenant_one_host' as TenantId, { url: `${r.url}?e=${i}`, events: ['*'] });
  await Promise.all(Array.from({ length: EVENTS }, (_, i) => h.publish('tenant_one_host', 'user.updated', { userId: `user_${i}` })));
  await r.waitFor(CONNECTIONS_PER_ORIGIN, 15_000);
  let held = 0;
  for (let i = 0; i < 10; i++) {
    held = Math.max(held, await metric('hookstream_delivery_messages_held'));
    await sleep(500);
  }
  await r.waitFor(ENDPOINTS * EVENTS, 60_000);
  const concurrent = Math.max(...r.received.map((x) => x.concurrent));
  t.log(`held at most ${held} deliveries; at most ${concurrent} POSTs at once`);
  t.true(held <= CONNECTIONS_PER_ORIGIN + ENDPOINTS, `${held} deliveries held (sockets ${CONNECTIONS_PER_ORIGIN}, lanes ${ENDPOINTS * MAX_IN_FLIGHT})`);
  t.true(concurrent > CONNECTIONS_PER_ORIGIN * 0.75, `the sockets were used: at most ${concurrent} POSTs at once`);
  t.true(concurrent <= CONNECTIONS_PER_ORIGIN);
  const deliveries = new Set(r.received.map((x) => `${String(x.headers['webhook-id'])} ${x.path}`));
  t.is(deliveries.size, ENDPOINTS * EVENTS, 'every event reached every endpoint');
});
