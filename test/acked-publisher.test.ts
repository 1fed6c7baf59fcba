// The publish acknowledgement's reading: a duplicate by Nats-Msg-Id is stored where the first copy is, but a
// duplicate at sequence 0 (the server saw the id before the first copy was stored; nats-server 2.10.27 lost
// deliveries that way on a cluster) is not taken as stored: the publish fails and its caller publishes again.
import test from 'ava';
import { jetstreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders, type NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { createAckedPublisher, PublishRejectedError } from '../src/nats/acked-publisher.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';

let nats: NatsServer;
let nc: NatsConnection;

test.before(async () => {
  nats = await startNatsServer();
  nc = await connectNats({ url: nats.url });
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'ACKED', subjects: ['acked.>'] });
});

test.after.always(async () => {
  await nc?.close();
  await nats?.dispose();
});

const withId = (id: string) => { const h = natsHeaders(); h.set('Nats-Msg-Id', id); return h; };

test('a duplicate by Nats-Msg-Id resolves with the first copy\'s place', async (t) => {
  const publisher = createAckedPublisher(nc, { timeoutMs: 5000 });
  t.teardown(() => publisher.close());
  const first = await publisher.publish('acked.a', 'x', withId('dup-1'));
  const again = await publisher.publish('acked.a', 'x', withId('dup-1'));
  t.deepEqual(again, first);
  t.true(first.seq > 0);
});

test('an acknowledgement of a duplicate at sequence 0 is a failed publish, to be published again', async (t) => {
  // A responder in place of the stream, answering as a clustered stream whose first copy is still proposed.
  const answers = ['{"stream":"FAKE","seq":0,"duplicate":true}', '{"stream":"FAKE","seq":42,"duplicate":true}'];
  const sub = nc.subscribe('fake.>', { callback: (_e, m) => { m.respond(answers.shift() ?? '{"stream":"FAKE","seq":43}'); } });
  t.teardown(() => sub.unsubscribe());
  const publisher = createAckedPublisher(nc, { timeoutMs: 5000 });
  t.teardown(() => publisher.close());
  const e = await t.throwsAsync(publisher.publish('fake.a', 'x', withId('dup-2')), { instanceOf: PublishRejectedError });
  t.regex(e!.message, /not stored yet \(sequence 0\)/);
  t.deepEqual(await publisher.publish('fake.a', 'x', withId('dup-2')), { stream: 'FAKE', seq: 42 }, 'a duplicate with a sequence is stored');
});
