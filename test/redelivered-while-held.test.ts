// A delivery the server hands out again while this process still holds it (in its attempt) is attempted
// once: the attempt under way settles it (src/delivery/pull-loop.ts; for an ordered endpoint, its key's
// gate). nats-server does that when a nak for the message arrives from elsewhere (a stopping instance
// handing its deliveries back), and 2.9.10 did it twice within milliseconds when such a nak and the
// message's ack wait fell together: a service restart mid-burst POSTed one delivery twice. Real service,
// NATS and receiver; the nak goes to the ack subject that the service's own keep-alives (`+WPI`) name
// while the attempt runs.
import test from 'ava';
import type { Msg } from '@nats-io/nats-core';
import { keyedConsumerName } from '../streams/deliveries.ts';
import { connectNats } from '../src/nats/connect.ts';
import { Ordering } from '../src/domain/endpoint.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';

let h: TestService;

test.before(async () => {
  // A one-second ack wait: the keep-alives come every half second while an attempt runs.
  h = await startTestService('held_redelivery', { HOOKSTREAM_RETRY_SCHEDULE: '1s,1s,1s' });
});
test.after.always(() => h?.closeAll());

for (const ordering of [Ordering.None, Ordering.Key]) {
  test.serial(`a delivery handed out again during its attempt is not attempted twice (ordering ${ordering})`, async (t) => {
    const tenant = `tenant_held_${ordering}` as TenantId;
    const r = await h.receiver(() => ({ status: 204, delayMs: 2000 }));
    const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['user.*'], ordering });
    const consumer = ordering === Ordering.Key ? keyedConsumerName(endpoint.id) : endpoint.id;
    const other = await connectNats({ url: h.nats.url });
    t.teardown(() => other.close());
    const keepAlive = new Promise<Msg>((resolve) => {
      // Its delivery stream's consumer, or with direct delivery its partition stream's (same name).
      other.subscribe(`$JS.ACK.*.${consumer}.>`, { max: 1, callback: (_e, m) => resolve(m) });
    });
    await other.flush();

    await h.publish(tenant, 'user.updated', { userId: 'user_held' });
    await r.waitFor(1, 10_000);
    const { subject } = await keepAlive;
    // As another instance would hand it back: the server redelivers it at once, to this service's pull.
    other.publish(subject, '-NAK');
    await other.flush();

    // The consumer that handed it out (`$JS.ACK.<stream>.<consumer>.…`) has nothing left to hand out or acked.
    const stream = subject.split('.')[2]!;
    const settled = async () => {
      const info = await h.service.jsm.consumers.info(stream, consumer);
      return info.num_pending + info.num_ack_pending === 0 && info.ack_floor.stream_seq >= info.delivered.stream_seq;
    };
    await eventually(async () => ((await settled()) ? true : undefined), 15_000, 'the delivery acked');
    // Longer than the ack wait: a delivery left pending by the second copy would be sent again by now.
    await new Promise((resolve) => setTimeout(resolve, 2500));
    t.is(r.received.length, 1, 'one POST');
  });
}
