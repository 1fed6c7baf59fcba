// The router re-pulls at a consumer leader election through nats.js's consume() internals (resetPending():
// nats.js 3 has no public way). Issue 23: this test fails when an upgrade of @nats-io/jetstream removes
// or changes it, rather than the re-pull silently doing nothing.
import test from 'ava';
import { AckPolicy, jetstream, jetstreamManager, type ConsumerMessages } from '@nats-io/jetstream';
import { connectNats } from '../src/nats/connect.ts';
import { startNatsServer } from './helpers/nats-server.ts';

test('a consume() of the installed nats.js can be told to pull again, and says it did', async (t) => {
  const server = await startNatsServer();
  t.teardown(() => server.dispose());
  const nc = await connectNats({ url: server.url });
  t.teardown(() => nc.close());
  const jsm = await jetstreamManager(nc);
  await jsm.streams.add({ name: 'REPULL', subjects: ['repull.>'] });
  await jsm.consumers.add('REPULL', { durable_name: 'c', ack_policy: AckPolicy.Explicit });
  const js = jetstream(nc);
  const messages = await (await js.consumers.get('REPULL', 'c')).consume({ max_messages: 10 });
  t.teardown(() => messages.close());
  const impl = messages as ConsumerMessages & { resetPending?: () => Promise<boolean> };
  t.is(typeof impl.resetPending, 'function', 'src/nats/consumer-leaders.ts relies on it');
  t.true(await impl.resetPending!(), 'a pull was made again');
  // And the consume still delivers after it.
  await js.publish('repull.x', 'after');
  for await (const m of messages) {
    t.is(m.string(), 'after');
    m.ack();
    break;
  }
});
