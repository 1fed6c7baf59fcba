// The router writes its fan-out publishes' headers as bytes (src/nats/header-block.ts): nats.js's own decoder
// must read them as it reads what nats.js's headers object sends, the bytes must be the same bytes, a value
// that would start a header line of its own must be refused, and a real publish must carry them.
import test from 'ava';
import { jetstreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders, InvalidArgumentError, MsgHdrsImpl, type MsgHdrs, type NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { createAckedPublisher } from '../src/nats/acked-publisher.ts';
import { EncodedHeaders, HeaderBlock } from '../src/nats/header-block.ts';
import { WireHeaders } from '../src/nats/wire-headers.ts';
import { DeliveryHeader } from '../streams/deliveries.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';

/** What the router puts in a delivery, in the order it writes them: trace context and a keyed delivery's two. */
const routed: [string, string][] = [
  [DeliveryHeader.WebhookId, 'msg_2x8Kf0Q'],
  [DeliveryHeader.Event, 'user.created'],
  [DeliveryHeader.Tenant, 'tenant_ünïcode'],
  [DeliveryHeader.EventSeq, '1234'],
  ['traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'],
  ['tracestate', 'congo=t61rcWkgMzE,rojo=00f067aa0ba902b7'],
  [DeliveryHeader.Endpoint, 'ep_01HZY'],
  [DeliveryHeader.EndpointVersion, '42'],
  ['Nats-Msg-Id', 'Zm9vYmFyYmF6cXV4cXV1eA.ep_01HZY.41'],
  [DeliveryHeader.OrderingKey, 'user: "x" ~ {a:b}'],
  [DeliveryHeader.OrderedAfter, '1233'],
];

function theirs(pairs: [string, string][]): MsgHdrsImpl {
  const h = natsHeaders() as MsgHdrsImpl;
  for (const [k, v] of pairs) h.set(k, v);
  return h;
}

function ours(pairs: [string, string][]): EncodedHeaders {
  const b = new HeaderBlock();
  for (const [k, v] of pairs) b.add(k, v);
  return b.encoded();
}

test('the bytes are those nats.js sends for the same headers, and nats.js reads them back alike', (t) => {
  const cases: [string, [string, string][]][] = [
    ['a keyed, traced delivery', routed],
    ['an unkeyed one', routed.slice(0, 9)],
    ['padded and empty values, colons in a value', [['A', '  spaced value  '], ['B', 'x:y:z'], ['C', ''], ['D', '\tt\t']]],
    ['one header', [['Nats-Msg-Id', 'x']]],
  ];
  for (const [name, pairs] of cases) {
    const expected = theirs(pairs);
    const encoded = ours(pairs);
    t.deepEqual(encoded.encode(), expected.encode(), name);
    const decoded = MsgHdrsImpl.decode(encoded.encode());
    t.deepEqual([...decoded], [...expected], name);
    t.deepEqual([...new WireHeaders(encoded.encode())], [...expected], `${name}: the delivery role's reader`);
  }
});

test('the headers every delivery shares are written once; each copy adds its own', (t) => {
  const common = new HeaderBlock();
  for (const [k, v] of routed.slice(0, 6)) common.add(k, v);
  const a = common.copy();
  const b = common.copy();
  a.add(DeliveryHeader.Endpoint, 'ep_a');
  b.add(DeliveryHeader.Endpoint, 'ep_b');
  b.add('Nats-Msg-Id', 'id.ep_b');
  common.add('X-Later', 'only the common block');
  t.deepEqual(a.encoded().encode(), theirs([...routed.slice(0, 6), [DeliveryHeader.Endpoint, 'ep_a']]).encode());
  t.deepEqual(b.encoded().encode(), theirs([...routed.slice(0, 6), [DeliveryHeader.Endpoint, 'ep_b'], ['Nats-Msg-Id', 'id.ep_b']]).encode());
  t.is(common.encoded().get('X-Later'), 'only the common block');
  t.false(a.encoded().has('X-Later'));
});

test('a value with CR or LF is refused as nats.js refuses it: a producer\'s value cannot add a header', (t) => {
  for (const hostile of ['x\r\nNats-Msg-Id: forged', 'x\nNats-Msg-Id: forged', 'x\rY: z', '\r\n', 'trailing\n', '\r\n\r\nbody']) {
    const e = t.throws(() => new HeaderBlock().add(DeliveryHeader.OrderingKey, hostile), { instanceOf: InvalidArgumentError });
    t.regex(e!.message, /cannot contain/);
    t.throws(() => natsHeaders().set(DeliveryHeader.OrderingKey, hostile), { instanceOf: InvalidArgumentError });
  }
  // What is left is sent as nats.js sends it: other control characters and non-ASCII as they are.
  for (const odd of ['\u0000nul', 'tab\there', 'ünï😀', '\u2028sep', 'x\u0085y']) {
    t.deepEqual(ours([['X-Odd', odd]]).encode(), theirs([['X-Odd', odd]]).encode(), JSON.stringify(odd));
  }
});

test('a name nats.js would refuse is refused', (t) => {
  for (const name of ['', 'has space', 'colon:', 'ünï', 'tab\t', 'x\r\ny']) {
    t.throws(() => new HeaderBlock().add(name, 'v'), { instanceOf: InvalidArgumentError }, JSON.stringify(name));
  }
  t.notThrows(() => new HeaderBlock().add('Nats-Expected-Last-Subject-Sequence', '1'));
});

test('encoded headers read as headers and cannot be changed', (t) => {
  const h: MsgHdrs = ours(routed);
  t.is(h.get('Nats-Msg-Id'), 'Zm9vYmFyYmF6cXV4cXV1eA.ep_01HZY.41');
  t.is(h.get('nats-msg-id'), '');
  t.true(h.has(DeliveryHeader.OrderedAfter));
  t.is(h.code, 0);
  t.false(h.hasError);
  t.deepEqual(h.keys(), routed.map(([k]) => k));
  t.throws(() => h.set('a', 'b'), { instanceOf: TypeError });
  t.throws(() => h.append('a', 'b'), { instanceOf: TypeError });
  t.throws(() => h.delete('a'), { instanceOf: TypeError });
});

let nats: NatsServer;
let nc: NatsConnection;

test.before(async () => {
  nats = await startNatsServer();
  nc = await connectNats({ url: nats.url });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'BLOCKS', subjects: ['blocks.>'], duplicate_window: 60_000_000_000 });
});

test.after.always(async () => {
  await nc?.close();
  await nats?.dispose();
});

test('published through nats-server, the message carries them: a subscriber reads them, JetStream dedupes by them', async (t) => {
  const sub = nc.subscribe('blocks.a', { max: 1 });
  const publisher = createAckedPublisher(nc, { timeoutMs: 5000 });
  t.teardown(() => publisher.close());
  const first = await publisher.publish('blocks.a', 'body', ours(routed));
  for await (const m of sub) {
    t.deepEqual([...m.headers!], [...theirs(routed)]);
    t.is(m.string(), 'body');
  }
  // Stored with its Nats-Msg-Id: the same id again is the first copy (the router's idempotent fan-out).
  const again = await publisher.publish('blocks.a', 'body', ours([['Nats-Msg-Id', routed[8]![1]]]));
  t.deepEqual(again, first);
  const jsm = await jetstreamManager(nc);
  const stored = await jsm.streams.getMessage('BLOCKS', { seq: first.seq });
  t.deepEqual([...stored!.header], [...theirs(routed)]);
});
