// The ordering gate (issue 21) against a real nats-server, with deliveries stored on a key's subject out of
// event order, as a router publishing late leaves them (a fan-out NATS failed part-way, two routers
// racing, a cover catch-up), and a router consumer whose progress the test makes by acking it by hand:
// the gate lets the key's deliveries go in EVENTS order, and none before the router has handled every
// earlier event.
import test, { type ExecutionContext } from 'ava';
import { AckPolicy, jetstream, jetstreamManager, RetentionPolicy, type JsMsg } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { createNextBySubject } from '../src/nats/next-by-subject.ts';
import { createKeyGate, type KeyGate } from '../src/delivery/ordered-gate.ts';
import { createRouterFloor } from '../src/delivery/router-floor.ts';
import { createRecentAcks, type RecentAcks } from '../src/delivery/recent-acks.ts';
import type { InFlight } from '../src/delivery/in-flight.ts';
import type { PulledMsg } from '../src/nats/pulled-msg.ts';
import { silentLogger } from '../src/log.ts';
import { DeliveryHeader, deliveryStream, lateMarkSubject } from '../streams/deliveries.ts';
import { ensureEventsStream, EVENTS_STREAM, ROUTER_CONSUMER } from '../streams/events.ts';
import { startNatsServer } from './helpers/nats-server.ts';
import { eventually } from './helpers/service.ts';

const STREAM = 'GATE_DELIVERIES';
const KEY = 'deliveries.gate.k.key1';
const OTHER = 'deliveries.gate.k.key2';
/** Long enough for the gate to have read the floor (every 20 ms) and the key several times over. */
const SETTLE_MS = 400;

/** A server of the test's own with the EVENTS stream (and its router consumer). */
async function natsWithEvents(t: ExecutionContext) {
  const server = await startNatsServer();
  t.teardown(() => server.dispose());
  const nc = await connectNats({ url: server.url });
  t.teardown(() => nc.close());
  const jsm = await jetstreamManager(nc);
  await ensureEventsStream(jsm);
  return { nc, jsm, js: jetstream(nc) };
}

/**
 * A fetched message handed to the gate as the pull feed hands it on; once released, what the delivery role
 * does with it: a 2xx (its event recorded in `released`), its ack, the end of its attempt.
 */
function admit(d: { gate: KeyGate; inFlight: Set<InFlight>; recentAcks: RecentAcks; released: number[] }, jm: JsMsg): void {
  const m: PulledMsg = {
    subject: jm.subject, data: jm.data, headers: jm.headers, reply: '', seq: jm.seq, info: jm.info,
    ack: () => jm.ack(), nak: (n) => jm.nak(n), working: () => jm.working(), term: () => jm.term(),
  };
  const tracked: InFlight = { msg: m, touched: performance.now(), wait: 30_000 };
  d.inFlight.add(tracked);
  d.gate.admit(tracked, () => {
    d.released.push(Number(m.headers?.get(DeliveryHeader.EventSeq)));
    d.recentAcks.add(m);
    m.ack();
    d.gate.ended(tracked);
  });
}

/** A gate on `stream` with its floor reader (reading the marks too with `marks`), and `take` to hand it the next deliveries. */
function startGate(t: ExecutionContext, d: Awaited<ReturnType<typeof natsWithEvents>>, stream: string, marks: boolean) {
  const heads = createNextBySubject(d.nc, { timeoutMs: 5000 });
  const floor = createRouterFloor({ jsm: d.jsm, log: silentLogger, pollMs: 20, ...(marks ? { heads } : {}) });
  const recentAcks = createRecentAcks();
  const inFlight = new Set<InFlight>();
  const gate = createKeyGate({ heads, stream, floor, recentAcks, inFlight, endpoint: 'webhook_gate', log: silentLogger });
  t.teardown(() => { gate.close(); floor.close(); heads.close(); });
  const released: number[] = [];
  const take = async (count: number) => {
    const consumer = await d.js.consumers.get(stream, 'gate');
    let got = 0;
    for await (const jm of await consumer.fetch({ max_messages: count, expires: 2000 })) {
      admit({ gate, inFlight, recentAcks, released }, jm);
      if (++got === count) break;
    }
  };
  return { gate, released, take };
}

test('a key\'s deliveries stored out of event order go in event order, each once the router has handled every earlier event', async (t) => {
  const d = await natsWithEvents(t);
  const { jsm, js } = d;
  await jsm.streams.add({ name: STREAM, subjects: ['deliveries.gate.>'], retention: RetentionPolicy.Workqueue });
  await jsm.consumers.add(STREAM, { durable_name: 'gate', ack_policy: AckPolicy.Explicit, filter_subject: 'deliveries.gate.>' });

  // Five events in EVENTS (sequences 1-5): 1-4 of key1, 5 of key2.
  for (let n = 1; n <= 5; n++) t.is((await js.publish('events.tenant_gate.user.updated', '{}')).seq, n);
  // Their deliveries as late routers store them: event 2's after 3's and 4's; key2's first of all.
  const deliver = async (subject: string, event: number) => {
    const hd = natsHeaders();
    hd.set(DeliveryHeader.EventSeq, String(event));
    await js.publish(subject, JSON.stringify({ event }), { headers: hd });
  };
  await deliver(OTHER, 5);
  for (const event of [1, 3, 4, 2]) await deliver(KEY, event);

  const { gate, released, take } = startGate(t, d, STREAM, false);
  await take(5);

  // The router has handled nothing: event 1 has no earlier event, so it goes; key2's event 5 waits.
  await eventually(() => (released.length >= 1 ? true : undefined), 5000, 'event 1');
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  t.deepEqual(released, [1], 'nothing after event 1 while the router has handled nothing');

  // The router handles events 1 and 2 (acked by hand, as it acks a stored fan-out).
  const router = await js.consumers.get(EVENTS_STREAM, ROUTER_CONSUMER);
  const routeNext = async (count: number) => {
    const got: JsMsg[] = [];
    for await (const m of await router.fetch({ max_messages: count, expires: 2000 })) { got.push(m); if (got.length === count) break; }
    for (const m of got) await m.ackAck();
  };
  await routeNext(2);
  // Event 2 (stored last) goes before 3, then 3: the floor is at 2, event 4 waits for event 3.
  await eventually(() => (released.length >= 3 ? true : undefined), 5000, 'events 2 and 3');
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  t.deepEqual(released, [1, 2, 3], 'event 4 holds while the router has not handled event 3');

  await routeNext(2);
  await eventually(() => (released.length >= 5 ? true : undefined), 5000, 'events 4 and 5');
  t.deepEqual(released.slice(0, 3), [1, 2, 3]);
  t.deepEqual(released.slice(3).sort(), [4, 5], 'the rest once the router passed them');
  t.is(gate.parked(), 0);
});

test('with the router\'s late marks, a key is read only up to its delivery unless a mark is stored after it', async (t) => {
  const d = await natsWithEvents(t);
  const { nc, jsm, js } = d;
  const stream = deliveryStream(0);
  const key = 'deliveries.0.webhook_gate.k.key1';
  await jsm.streams.add({ name: stream, subjects: ['deliveries.0.>'], retention: RetentionPolicy.Workqueue });
  await jsm.consumers.add(stream, { durable_name: 'gate', ack_policy: AckPolicy.Explicit, filter_subject: 'deliveries.0.webhook_gate.k.>' });
  // Every read of the key, by where it starts.
  const reads: number[] = [];
  nc.subscribe(`$JS.API.STREAM.MSG.GET.${stream}`, { callback: (_e, m) => {
    const body = JSON.parse(m.string()) as { seq?: number; next_by_subj?: string };
    if (body.next_by_subj === key) reads.push(body.seq ?? 0);
  } });
  for (let n = 1; n <= 6; n++) await js.publish('events.tenant_gate.user.updated', '{}');
  // The router's acks, each after its event's deliveries (and their marks) are stored.
  const router = await js.consumers.get(EVENTS_STREAM, ROUTER_CONSUMER);
  const route = async (count: number) => {
    const got: JsMsg[] = [];
    for await (const m of await router.fetch({ max_messages: count, expires: 2000 })) { got.push(m); if (got.length === count) break; }
    for (const m of got) await m.ackAck();
  };

  const deliver = async (event: number) => {
    const hd = natsHeaders();
    hd.set(DeliveryHeader.EventSeq, String(event));
    return (await js.publish(key, JSON.stringify({ event }), { headers: hd })).seq;
  };
  const mark = async () => (await js.publish(lateMarkSubject(stream), '')).seq;
  // As a router stores them: its first store marked, then a run in event order.
  await deliver(1);
  await mark();
  await deliver(2);
  const lastInRun = await deliver(3);
  await route(3);

  const { released, take } = startGate(t, d, stream, true);
  // The first delivery waits for the floor's first reading, which reads the stream's marks too.
  await take(3);
  await eventually(() => (released.length >= 3 ? true : undefined), 5000, 'events 1-3');
  t.deepEqual(released, [1, 2, 3]);
  t.false(reads.some((from) => from > lastInRun), `never read past the key's deliveries: ${JSON.stringify(reads)} (last ${lastInRun})`);

  // A late store (event 5 after event 6's), then the router's mark: the gate reads to the end and waits.
  const six = await deliver(6);
  await deliver(5);
  await mark();
  await route(3);
  await take(2);
  await eventually(() => (released.length >= 5 ? true : undefined), 5000, 'events 5 and 6');
  t.deepEqual(released, [1, 2, 3, 5, 6]);
  t.true(reads.some((from) => from > six), `read past event 6's delivery: ${JSON.stringify(reads)} (6 at ${six})`);
});

test("a delivery stamped with its tenant's barrier waits for the router's floor at it, not for another tenant's earlier events", async (t) => {
  const d = await natsWithEvents(t);
  const { jsm, js } = d;
  await jsm.streams.add({ name: STREAM, subjects: ['deliveries.gate.>'], retention: RetentionPolicy.Workqueue });
  await jsm.consumers.add(STREAM, { durable_name: 'gate', ack_policy: AckPolicy.Explicit, filter_subject: 'deliveries.gate.>' });
  // Events 1 and 3 are another tenant's; 2 and 4 this tenant's, on one key. Event 4's delivery was stamped
  // once event 2 was handled: it needs the floor at 2 only. Key2's delivery of event 4 carries no stamp.
  for (let n = 1; n <= 4; n++) await js.publish(`events.${n % 2 ? 'tenant_a' : 'tenant_b'}.user.updated`, '{}');
  const deliver = async (subject: string, event: number, after?: number) => {
    const hd = natsHeaders();
    hd.set(DeliveryHeader.EventSeq, String(event));
    if (after !== undefined) hd.set(DeliveryHeader.OrderedAfter, String(after));
    await js.publish(subject, JSON.stringify({ event }), { headers: hd });
  };
  await deliver(KEY, 2, 1);
  await deliver(KEY, 4, 2);
  await deliver(OTHER, 4);

  const { gate, released, take } = startGate(t, d, STREAM, true);
  await take(3);

  // The router handles events 1 and 2; event 3 (the other tenant's) stays unhandled.
  const router = await js.consumers.get(EVENTS_STREAM, ROUTER_CONSUMER);
  const got: JsMsg[] = [];
  for await (const m of await router.fetch({ max_messages: 3, expires: 2000 })) { got.push(m); if (got.length === 3) break; }
  await got[0]!.ackAck();
  await got[1]!.ackAck();
  await eventually(() => (released.length >= 2 ? true : undefined), 5000, 'key1\'s events 2 and 4');
  await new Promise((r) => setTimeout(r, SETTLE_MS));
  // Key2's delivery of event 4 cannot go with the floor at 2: the 4 released is key1's, stamped.
  t.deepEqual(released, [2, 4], 'the stamped delivery went with the floor at 2');
  t.is(gate.parked(), 1, 'the unstamped delivery waits for event 3');

  await got[2]!.ackAck();
  await eventually(() => (released.length >= 3 ? true : undefined), 5000, 'key2\'s event 4');
  t.deepEqual(released, [2, 4, 4]);
  t.is(gate.parked(), 0);
});
