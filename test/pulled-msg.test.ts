// Messages pulled by the delivery role's pull feeds: their place from the ack subject, their headers read
// from the bytes nats.js received (src/nats/wire-headers.ts, not nats.js's decoder), and their ack.
import test from 'ava';
import { AckPolicy, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { createPullFeeds } from '../src/nats/pull-feed.ts';
import type { PulledMsg } from '../src/nats/pulled-msg.ts';
import { WireHeaders } from '../src/nats/wire-headers.ts';
import { silentLogger } from '../src/log.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';

let nats: NatsServer;
let nc: NatsConnection;
let jsm: JetStreamManager;

test.before(async () => {
  nats = await startNatsServer();
  nc = await connectNats({ url: nats.url });
  jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'PULLED', subjects: ['pulled.>'] });
  await jsm.consumers.add('PULLED', { durable_name: 'c', ack_policy: AckPolicy.Explicit, ack_wait: 30e9 });
});

test.after.always(async () => {
  await nc?.close();
  await nats?.dispose();
});

test('a pulled message: its place, headers as sent (none when none were), its ack', async (t) => {
  const h = natsHeaders();
  h.set('webhook-id', 'msg_1');
  h.set('hookstream-tenant', 'tenant_ü');
  h.append('x-twice', 'a');
  h.append('x-twice', 'b');
  const js = jsm.jetstream();
  await js.publish('pulled.a', 'with headers', { headers: h });
  await js.publish('pulled.b', 'without');

  const feeds = createPullFeeds(nc, { expiresMs: 30_000, heartbeatMs: 5_000, inboxPrefix: '_INBOX', log: silentLogger });
  t.teardown(() => feeds.stop());
  const got: PulledMsg[] = [];
  const both = new Promise<void>((resolve) => {
    feeds.open({ stream: 'PULLED', consumer: 'c', capacity: () => 2 - got.length, onMessage: (m) => { got.push(m); if (got.length === 2) resolve(); } });
  });
  await both;

  const [a, b] = got as [PulledMsg, PulledMsg];
  t.deepEqual(a.info, { stream: 'PULLED', consumer: 'c', deliveryCount: 1, streamSequence: 1 });
  t.is(a.subject, 'pulled.a');
  t.is(new TextDecoder().decode(a.data), 'with headers');
  t.true(a.headers instanceof WireHeaders);
  t.is(a.headers?.get('webhook-id'), 'msg_1');
  t.is(a.headers?.get('hookstream-tenant'), 'tenant_ü');
  t.deepEqual(a.headers?.values('x-twice'), ['a', 'b']);
  t.is(a.headers?.get('absent'), '');
  t.is(b.headers, undefined);
  t.is(new TextDecoder().decode(b.data), 'without');

  a.ack();
  b.ack();
  // The server takes acks apart from the connection's flush: asked until they show (or 5 s).
  let info = await jsm.consumers.info('PULLED', 'c');
  for (let i = 0; i < 100 && info.num_ack_pending > 0; i++) {
    await new Promise((r) => setTimeout(r, 50));
    info = await jsm.consumers.info('PULLED', 'c');
  }
  t.is(info.num_ack_pending, 0);
  t.is(info.num_pending, 0);
});
