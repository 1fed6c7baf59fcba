// The service's NATS connection writes what a turn of the event loop published in one socket write (not one
// per microtask checkpoint), keeps the order of publishes, and writes out what was published before a close.
import test from 'ava';
import type { NatsConnection } from '@nats-io/nats-core';
import type { NatsConnectionImpl } from '@nats-io/nats-core/internal';
import { connectNats } from '../src/nats/connect.ts';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';

let nats: NatsServer;
let nc: NatsConnection;

test.before(async () => {
  nats = await startNatsServer();
  nc = await connectNats({ url: nats.url });
});

test.after.always(async () => {
  await nc?.close();
  await nats?.dispose();
});

/** Counts the socket writes of a connection from now on. */
function countWrites(conn: NatsConnection): () => number {
  const transport = (conn as NatsConnectionImpl).protocol.transport;
  const send = transport.send.bind(transport);
  let writes = 0;
  transport.send = (frame) => {
    writes++;
    send(frame);
  };
  return () => writes;
}

test('publishes between awaits of one turn leave in one socket write, in order', async (t) => {
  const got: string[] = [];
  const sub = nc.subscribe('turn.a', { callback: (_e, m) => void got.push(m.string()) });
  await nc.flush();
  const publisher = await connectNats({ url: nats.url });
  t.teardown(() => publisher.close());
  await publisher.flush();
  const writes = countWrites(publisher);
  for (let i = 0; i < 50; i++) {
    publisher.publish('turn.a', String(i));
    await Promise.resolve();
  }
  await new Promise((r) => setImmediate(r));
  t.is(writes(), 1);
  await publisher.flush();
  await nc.flush();
  sub.unsubscribe();
  t.deepEqual(got, Array.from({ length: 50 }, (_, i) => String(i)));
});

test('what was published just before close() is written out', async (t) => {
  const got: string[] = [];
  const sub = nc.subscribe('turn.b', { callback: (_e, m) => void got.push(m.string()) });
  t.teardown(() => sub.unsubscribe());
  await nc.flush();
  const publisher = await connectNats({ url: nats.url });
  publisher.publish('turn.b', 'last words');
  await publisher.close();
  for (let i = 0; i < 50 && got.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
  t.deepEqual(got, ['last words']);
});
