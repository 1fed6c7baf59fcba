// A tenant's large fan-out hands no event back. A tenant at its endpoints quota (raised by the operator to
// 1,000, as large as a tenant could make before there was a quota) publishes a burst of events, each fanned
// out to all its endpoints, fast and slow receivers; meanwhile another tenant publishes keyed events to an
// ordered endpoint (`ordering: key`). Before the router shared its publishes (src/router/fair-publishes.ts),
// such a fan-out had JetStream answer its last publishes after the router's 5 s publish-ack timeout: the
// router handed those events back (nak), and every tenant's ordered deliveries waited for them. Here no
// event is handed back (the router's metric and log line, and its consumer delivered each event once),
// every delivery of the fan-out arrives, and the other tenant's events arrive, each key in order.
// Real service, NATS, Postgres and loopback receivers.
import test from 'ava';
import { startTestService, tenantClient, type TestService } from './helpers/fixture.ts';
import { eventually } from './helpers/service.ts';
import { createTenantLimitsStore } from '../src/tenants/limits.ts';
import { EVENTS_STREAM, ROUTER_CONSUMER } from '../streams/events.ts';
import type { TenantId } from '../src/domain/ids.ts';
import type { Received, Receiver } from './helpers/receiver.ts';
import { deliveryAddress, DeliveryHeader } from '../streams/deliveries.ts';
import { connectNats } from '../src/nats/connect.ts';
import { jetstream } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';

let h: TestService;
/** The producers' own connection, as in production: the service's queued publishes do not delay theirs. */
let producer: NatsConnection;
const lines: string[] = [];

const BIG = 'tenant_fanout' as TenantId;
const ORDERED = 'tenant_fanout_ordered' as TenantId;
/** The big tenant's endpoints quota, all of it used. */
const ENDPOINTS = 1000;
/** Of its endpoints, these many on a receiver that answers slowly. */
const SLOW_ENDPOINTS = 100;
const SLOW_MS = 500;
/** Its burst: 20,000 deliveries, past its 4,096 pending publishes in the router. */
const EVENTS = 20;
/** The ordered tenant's keys, and rounds of one event per key. */
const KEYS = 5;
const ROUNDS = 6;
/** The router's line when it hands an event back (src/router/verdict.ts). */
const HANDED_BACK = 'event not routed, will be retried';

test.before(async () => {
  h = await startTestService('router_fanout', {
    // Warnings are kept (below) to look for the router's handing-back line.
    HOOKSTREAM_LOG_LEVEL: 'warn',
    // The endpoints are created through the API as fast as it answers.
    HOOKSTREAM_RATE_LIMIT: '100000',
  }, {
    logWrite: (line) => {
      lines.push(line);
      if (line.includes('"level":"error"')) process.stderr.write(line);
    },
  });
  // The operator's override (`hookstream tenants limits set`), before the API first reads the limits.
  const limits = createTenantLimitsStore(h.service.orm!);
  await limits.set(BIG, { endpoints: ENDPOINTS, writesPerSecond: 100_000 }, 'test');
  producer = await connectNats({ url: h.nats.url, name: 'router-fanout-producer' });
});

const publish = (tenant: TenantId, data: { userId: string; n: number }) =>
  jetstream(producer).publish(`events.${tenant}.user.updated`, JSON.stringify(data));
test.after.always(async () => {
  await producer?.close();
  await h?.closeAll();
});

const dataOf = (g: Received) => (JSON.parse(g.body) as { data: { userId: string; n: number } }).data;
const routerConsumer = () => h.service.jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER);

/** The router consumer's redelivered events, sampled until stopped: the most seen at once. */
function sampleRedelivered(): { stop(): Promise<number> } {
  let max = 0;
  let on = true;
  const loop = (async () => {
    while (on) {
      const c = await routerConsumer().catch(() => undefined);
      if (c) max = Math.max(max, c.num_redelivered);
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  return { async stop() { on = false; await loop; return max; } };
}

test("a tenant's 1,000-endpoint fan-out hands no event back, all of it arrives, and another tenant's ordered events arrive in order", async (t) => {
  const fast = await Promise.all(Array.from({ length: 4 }, () => h.receiver()));
  const slow = await h.receiver(() => ({ status: 200, delayMs: SLOW_MS }));
  const receivers: Receiver[] = [...fast, slow];

  // The big tenant's endpoints, up to its quota, each told apart by its URL's path.
  const api = await tenantClient(h, t, BIG);
  const created = Date.now();
  let next = 0;
  const statuses: number[] = [];
  await Promise.all(Array.from({ length: 8 }, async () => {
    for (let i = next++; i < ENDPOINTS; i = next++) {
      const receiver = i < SLOW_ENDPOINTS ? slow : fast[i % fast.length]!;
      statuses.push((await api.post('/v1/webhooks', { url: `${receiver.url}/${i}`, events: ['user.*'] })).status);
    }
  }));
  t.log(`${ENDPOINTS} endpoints created in ${Date.now() - created} ms`);
  t.deepEqual(statuses, Array(ENDPOINTS).fill(201), 'every endpoint up to the quota created');
  const over = await api.post('/v1/webhooks', { url: `${fast[0]!.url}/over`, events: ['user.*'] });
  t.is(over.status, 422, 'the tenant is at its endpoints quota');
  t.like(over.body.error, { code: 'quota_exceeded', limit: 'endpoints' });

  // The other tenant's ordered endpoint, live once a first event arrived.
  const ordered = await h.receiver();
  const { endpoint: orderedEndpoint } = await h.store.create(ORDERED, { url: ordered.url, events: ['user.*'], ordering: 'key' });
  // When the router publishes each of its keyed deliveries (a plain subscriber sees each publish), by EVENTS seq:
  // how much of an event's wait is the router's, how much the delivery's.
  const routedAt = new Map<number, number>();
  const routedSub = producer.subscribe(`${deliveryAddress(orderedEndpoint.id, h.config.deliveryShards).subject}.k.>`, {
    callback: (_e, msg) => { const seq = Number(msg.headers?.get(DeliveryHeader.EventSeq)); if (!routedAt.has(seq)) routedAt.set(seq, Date.now()); },
  });
  // And an endpoint of the same tenant without ordering: its deliveries wait for nothing but their turn.
  const plain = await h.receiver();
  await h.store.create(ORDERED, { url: plain.url, events: ['user.*'] });
  await publish(ORDERED, { userId: 'user_warm', n: -1 });
  await ordered.waitFor(1, 30_000);
  await plain.waitFor(1, 30_000);

  const before = await routerConsumer();
  const redelivered = sampleRedelivered();
  const burst = Date.now();
  for (let n = 0; n < EVENTS; n++) await publish(BIG, { userId: `user_${n}`, n });
  // Meanwhile, one event per key a round, rounds 200 ms apart; each timed from its publish to its arrival.
  const publishedAt = new Map<string, number>();
  const seqOf = new Map<string, number>();
  for (let r = 0; r < ROUNDS; r++) {
    for (let k = 0; k < KEYS; k++) {
      publishedAt.set(`user_k${k} ${r}`, Date.now());
      seqOf.set(`user_k${k} ${r}`, (await publish(ORDERED, { userId: `user_k${k}`, n: r })).seq);
    }
    await new Promise((res) => setTimeout(res, 200));
  }

  // (b) Every delivery of the fan-out: each event's webhook-id at each endpoint, at least once.
  const bigDeliveries = () => {
    const seen = new Set<string>();
    for (const r of receivers) for (const g of r.received) seen.add(`${g.headers['webhook-id']} ${g.path}`);
    return seen;
  };
  await eventually(() => (bigDeliveries().size >= EVENTS * ENDPOINTS ? true : undefined), 120_000, 'every delivery of the fan-out');
  const fanOutMs = Date.now() - burst;
  const everyOrdered = () => ordered.received.filter((g) => dataOf(g).n >= 0);
  await eventually(() => (new Set(everyOrdered().map((g) => `${dataOf(g).userId} ${dataOf(g).n}`)).size >= KEYS * ROUNDS ? true : undefined), 60_000, 'every ordered event');
  const everyPlain = () => plain.received.filter((g) => dataOf(g).n >= 0);
  await eventually(() => (new Set(everyPlain().map((g) => `${dataOf(g).userId} ${dataOf(g).n}`)).size >= KEYS * ROUNDS ? true : undefined), 60_000, 'every event at the unordered endpoint');
  await eventually(async () => { const c = await routerConsumer(); return c.num_pending === 0 && c.num_ack_pending === 0 ? true : undefined; }, 30_000, 'every event acked by the router');
  const maxRedelivered = await redelivered.stop();
  const after = await routerConsumer();

  const seen = bigDeliveries();
  const ids = new Set([...seen].map((k) => k.split(' ')[0]));
  const paths = new Set([...seen].map((k) => k.split(' ')[1]));
  const requests = receivers.reduce((n, r) => n + r.received.length, 0);
  t.log(`the fan-out: ${EVENTS} events × ${ENDPOINTS} endpoints (${SLOW_ENDPOINTS} answering in ${SLOW_MS} ms) all delivered ${fanOutMs} ms after the burst; ${requests} requests (${requests - EVENTS * ENDPOINTS} repeats)`);
  t.is(seen.size, EVENTS * ENDPOINTS, 'each event at each endpoint');
  t.is(ids.size, EVENTS, 'each event of the burst, one webhook-id each');
  t.is(paths.size, ENDPOINTS, 'at each endpoint');

  // (c) The other tenant's events: all, each key's in publish order (first arrivals), with their time.
  const first = new Map<string, Received>();
  for (const g of everyOrdered()) { const d = dataOf(g); const k = `${d.userId} ${d.n}`; if (!first.has(k)) first.set(k, g); }
  const waits = [...first].map(([k, g]) => g.at - publishedAt.get(k)!).sort((a, b) => a - b);
  t.log(`the ordered tenant's ${first.size} events arrived in ${waits[0]} / ${waits[Math.floor(waits.length / 2)]} / ${waits[waits.length - 1]} ms (min / median / max) after their publish`);
  const plainFirst = new Map<string, Received>();
  for (const g of everyPlain()) { const d = dataOf(g); const k = `${d.userId} ${d.n}`; if (!plainFirst.has(k)) plainFirst.set(k, g); }
  const plainWaits = [...plainFirst].map(([k, g]) => g.at - publishedAt.get(k)!).sort((a, b) => a - b);
  t.log(`at its unordered endpoint: ${plainWaits[0]} / ${plainWaits[Math.floor(plainWaits.length / 2)]} / ${plainWaits[plainWaits.length - 1]} ms`);
  const slowestByRound = Array.from({ length: ROUNDS }, (_, r) => Math.max(...[...first].filter(([k]) => k.endsWith(` ${r}`)).map(([k, g]) => g.at - publishedAt.get(k)!)));
  t.log(`slowest of each round (200 ms apart): ${slowestByRound.join(', ')} ms`);
  routedSub.unsubscribe();
  const routing = [...first.keys()].map((k) => (routedAt.get(seqOf.get(k)!) ?? NaN) - publishedAt.get(k)!).sort((a, b) => a - b);
  t.log(`of which routing (publish to its delivery stored): ${routing[0]} / ${routing[Math.floor(routing.length / 2)]} / ${routing[routing.length - 1]} ms`);
  for (let k = 0; k < KEYS; k++) {
    const order = [...first.values()].filter((g) => dataOf(g).userId === `user_k${k}`).sort((a, b) => a.at - b.at).map((g) => dataOf(g).n);
    t.deepEqual(order, Array.from({ length: ROUNDS }, (_, r) => r), `key ${k} in publish order`);
  }

  // (a) No event handed back: the router's count and log line, and its consumer gave it each event once
  // (a nak'd or timed-out event is delivered again: one more consumer delivery than stream messages).
  const held = h.service.metrics.eventsHeld.get();
  const deliveries = after.delivered.consumer_seq - before.delivered.consumer_seq;
  const messages = after.delivered.stream_seq - before.delivered.stream_seq;
  t.log(`the router: ${h.service.metrics.eventsRetried.get()} events handed back, ${held} waited for the tenant's pending publishes; its consumer delivered ${deliveries} times for ${messages} events, at most ${maxRedelivered} redelivered at once`);
  const handedBack = lines.filter((l) => l.includes(HANDED_BACK));
  for (const l of handedBack.slice(0, 5)) t.log(l.trim());
  t.is(h.service.metrics.eventsRetried.get(), 0, 'no event handed back (hookstream_events_retried_total)');
  t.deepEqual(handedBack, [], 'no event handed back (its log line)');
  t.is(messages, EVENTS + KEYS * ROUNDS, 'the router was given every event');
  t.is(deliveries, messages, 'each event given to the router once: none redelivered');
  t.is(maxRedelivered, 0, 'no redelivered event pending in the router\'s consumer');
});
