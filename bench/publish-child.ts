// The producer of bench/nats-primitives.ts's shapes, in a process of its own so that the consumer side's CPU
// is measured without it. Told over IPC what to publish (`count` events of `bytes` bytes, event i to
// endpoint i % endpoints, 64 publishes awaiting their ack at once); says 'started' once connected, just
// before its first publish, and exits when the last is stored.
import { fileURLToPath } from 'node:url';
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';

export interface PublishOrder { url: string; count: number; endpoints: number; bytes: number }

/** Event subject of endpoint `e`: tenants of ten endpoints, endpoint j of a tenant takes type `e<j>`. */
export const shapeSubject = (e: number) => `events.t${Math.floor(e / 10)}.e${e % 10}`;

if (process.argv[1] === fileURLToPath(import.meta.url)) process.once('message', (order: PublishOrder) => void (async () => {
  const nc = await connect({ servers: order.url });
  const js = jetstream(nc);
  process.send?.('started');
  const body = 'x'.repeat(order.bytes);
  let next = 0;
  await Promise.all(Array.from({ length: 64 }, async () => {
    for (let i = next++; i < order.count; i = next++) await js.publish(shapeSubject(i % order.endpoints), body);
  }));
  await nc.close();
  process.exit(0);
})());
