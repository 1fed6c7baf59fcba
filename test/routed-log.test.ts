// The router's record of stored fan-outs (src/router/routed-log.ts), read back when events come again. A
// killed instance's events come back together, hundreds per marker bucket: they must share one read of
// the bucket (one request per marker), not read it each (issue 17: a restarted instance's router, and its
// deliveries with it, stalled for over two minutes on 2.15.1 and 2.9.10). Real nats-server.
import test from 'ava';
import { jetstream, jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import { connectNats } from '../src/nats/connect.ts';
import { createAckedPublisher } from '../src/nats/acked-publisher.ts';
import { createRoutedLog } from '../src/router/routed-log.ts';
import { silentLogger } from '../src/log.ts';
import { ensureRoutedStream, routedSubject, type RoutedMarker } from '../streams/routed.ts';
import { startNatsServer } from './helpers/nats-server.ts';

test('events coming back together read their bucket once, and each learns what was stored of it', async (t) => {
  const server = await startNatsServer();
  t.teardown(() => server.dispose());
  const nc = await connectNats({ url: server.url });
  t.teardown(() => nc.close());
  const jsm = await jetstreamManager(nc);
  await ensureRoutedStream(jsm);
  const js = jetstream(nc);
  // 300 events, each with its own partial marker (as the delivery role writes them), and one done range.
  const events = Array.from({ length: 300 }, (_, i) => i + 1);
  for (const seq of events) {
    const marker: RoutedMarker = { v: 1, partial: { [seq]: [`ep_${seq}@1`] } };
    await js.publish(routedSubject(seq), JSON.stringify(marker));
  }
  await js.publish(routedSubject(1), JSON.stringify({ v: 1, done: [[301, 310]] } satisfies RoutedMarker));

  let reads = 0;
  const counting = {
    streams: {
      getMessage: (...args: Parameters<JetStreamManager['streams']['getMessage']>) => { reads++; return jsm.streams.getMessage(...args); },
    },
  } as unknown as JetStreamManager;
  const publisher = createAckedPublisher(nc, { timeoutMs: 5000 });
  t.teardown(() => publisher.close());
  const log = createRoutedLog({ jsm: counting, publisher, intervalMs: 10, log: silentLogger });

  const found = await Promise.all([...events, 305].map((seq) => log.lookup(seq)));
  t.is(reads, 301 + 1, 'one request per marker and the one that found no more: the bucket was read once');
  events.forEach((seq, i) => t.deepEqual(found[i], { done: false, stored: new Set([`ep_${seq}@1`]) }, `event ${seq}`));
  t.deepEqual(found.at(-1), { done: true });
  t.is(await log.lookup(400), undefined, 'an event nothing was stored of');
  t.is(reads, 302, 'read again only after the cache expires');
});
