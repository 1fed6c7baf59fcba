// The tenants' queued deliveries for their `queued_deliveries` quota (src/router/tenant-backlog.ts), read
// from a real nats-server's endpoint consumers: summed per tenant, what was routed since added, the last
// listing kept while listing fails (one warning), no listing while no one asks (the first question lists
// at once), and no warning for a listing cut short by stop().
import test from 'ava';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { createLogger } from '../src/log.ts';
import { createTenantBacklog } from '../src/router/tenant-backlog.ts';
import { deliveryAddress, endpointConsumer, ensureDeliveryStreams } from '../streams/deliveries.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';

const SHARDS = 4;
const TENANT_OF: Record<string, string> = { ep_a1: 'a', ep_a2: 'a', ep_b1: 'b' };

let nats: NatsServer;
let nc: NatsConnection;

test.before(async () => {
  nats = await startNatsServer();
  nc = await connectNats({ url: nats.url });
  const jsm = await jetstreamManager(nc);
  await ensureDeliveryStreams(jsm, SHARDS, 1000);
  const js = jetstream(nc);
  for (const [endpoint, queued] of [['ep_a1', 3], ['ep_a2', 2], ['ep_b1', 4]] as const) {
    await jsm.consumers.add(deliveryAddress(endpoint, SHARDS).stream, endpointConsumer(endpoint, { shards: SHARDS, retrySchedule: [5000], maxQueued: 1000 }));
    for (let i = 0; i < queued; i++) await js.publish(deliveryAddress(endpoint, SHARDS).subject, `${endpoint} ${i}`);
  }
});

test.after.always(async () => {
  await nc?.close();
  await nats?.dispose();
});

const capture = () => {
  const lines: { level: string; msg: string }[] = [];
  return { lines, log: createLogger({ level: 'debug', write: (l) => lines.push(JSON.parse(l) as { level: string; msg: string }) }) };
};
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const until = async (ok: () => boolean) => {
  for (let i = 0; i < 200 && !ok(); i++) await sleep(25);
};
/** A backlog listing over `conn`, every `intervalMs`, with what it logs. */
const backlogOn = async (conn: NatsConnection, intervalMs: number) => {
  const { lines, log } = capture();
  const backlog = createTenantBacklog({ jsm: await jetstreamManager(conn), shards: SHARDS, tenantOf: (id) => TENANT_OF[id], log, intervalMs });
  return { backlog, lines };
};

test('sums each tenant\'s queued deliveries over its endpoints, plus what was routed since the listing', async (t) => {
  const { backlog } = await backlogOn(nc, 60_000);
  t.teardown(() => backlog.stop());
  await until(() => backlog.queued('a') > 0 && backlog.queued('b') > 0);
  t.is(backlog.queued('a'), 5);
  t.is(backlog.queued('b'), 4);
  t.is(backlog.queued('c'), 0);
  backlog.routed('a', 7);
  t.is(backlog.queued('a'), 12);
});

test('a failing listing keeps the last one with what was routed since, and warns once', async (t) => {
  const own = await connectNats({ url: nats.url });
  const { backlog, lines } = await backlogOn(own, 50);
  t.teardown(() => backlog.stop());
  await until(() => backlog.queued('b') === 4);
  t.is(backlog.queued('b'), 4);
  await own.close();
  backlog.routed('b', 2);
  // The router asks for every event it routes, and for a tenant it holds about once a second.
  for (let i = 0; i < 8; i++) {
    t.is(backlog.queued('b'), 6);
    await sleep(50);
  }
  t.is(lines.filter((l) => l.level === 'warn').length, 1);
});

test('no listing while no one asks; the first question after a quiet spell lists at once', async (t) => {
  const own = await connectNats({ url: nats.url });
  const { backlog, lines } = await backlogOn(own, 50);
  t.teardown(() => backlog.stop());
  await until(() => backlog.queued('a') === 5);
  // That question is answered by one more listing; then the timer's turns find no one asking.
  await sleep(300);
  // Listing on a closed connection fails, and says so: here it shows whether a listing was taken.
  await own.close();
  await sleep(400);
  t.deepEqual(lines.filter((l) => l.level === 'warn'), [], 'eight turns of the timer, no one asking: no listing');
  t.is(backlog.queued('a'), 5);
  await until(() => lines.length > 0);
  t.is(lines.filter((l) => l.level === 'warn').length, 1);
});

test('a listing cut short by stop() (the connection draining) logs no warning', async (t) => {
  const own = await connectNats({ url: nats.url });
  // The first listing starts at once and pages through SHARDS streams; the drain refuses its later pages.
  const { backlog, lines } = await backlogOn(own, 50);
  backlog.stop();
  await own.drain();
  await sleep(300);
  t.deepEqual(lines.filter((l) => l.level === 'warn'), []);
  t.is(backlog.queued('a'), 0);
});
