// Listing a stream's consumers (streams/ensure.ts `listConsumers`): nats-server lists a consumer deleted
// while it builds the page as null, which the service's start-up and the dead-letter backstop read. The race
// is too narrow to provoke on purpose, so the server's answer is given here over a real nats-server (without
// JetStream) by a responder on the JetStream API subject, as a server in that race sends it.
import test from 'ava';
import { jetstreamManager } from '@nats-io/jetstream';
import { connectNats } from '../src/nats/connect.ts';
import { listConsumers } from '../streams/ensure.ts';
import { startNatsServer } from './helpers/nats-server.ts';

test('a consumer deleted while the server lists them is skipped, the others are listed', async (t) => {
  const nats = await startNatsServer({ jetstream: false });
  const nc = await connectNats({ url: nats.url });
  t.teardown(async () => { await nc.close(); await nats.dispose(); });
  const info = (name: string) => ({ stream_name: 'DELIVERIES_0', name, created: new Date().toISOString(), config: { durable_name: name, ack_policy: 'explicit' }, delivered: { consumer_seq: 0, stream_seq: 0 }, ack_floor: { consumer_seq: 0, stream_seq: 0 }, num_ack_pending: 0, num_redelivered: 0, num_waiting: 0, num_pending: 0, ts: new Date().toISOString() });
  // One page: the consumers a, (one deleted meanwhile), c.
  nc.subscribe('$JS.API.CONSUMER.LIST.DELIVERIES_0', {
    callback: (_e, m) => { m.respond(JSON.stringify({ type: 'io.nats.jetstream.api.v1.consumer_list_response', total: 3, offset: 0, limit: 256, consumers: [info('a'), null, info('c')] })); },
  });
  await nc.flush();
  const jsm = await jetstreamManager(nc, { checkAPI: false });

  const raw: unknown[] = [];
  for await (const ci of jsm.consumers.list('DELIVERIES_0')) raw.push(ci);
  t.true(raw.includes(null), 'the client hands the null on as it is');

  const names: string[] = [];
  for await (const ci of listConsumers(jsm, 'DELIVERIES_0')) names.push(ci.name);
  t.deepEqual(names, ['a', 'c']);
});
