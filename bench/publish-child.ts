// The producer of bench/nats-primitives.ts's shapes, in a process of its own so that the consumer side's CPU
// is measured without it. Told over IPC what to publish (`count` events of `bytes` bytes, event i to
// endpoint i % endpoints, 64 publishes awaiting their ack at once, or at a steady rate); says 'started'
// once connected, just before its first publish, and exits when the last is stored.
import { fileURLToPath } from 'node:url';
import { jetstream } from '@nats-io/jetstream';
import { connect } from '@nats-io/transport-node';

export interface PublishOrder {
  url: string;
  count: number;
  endpoints: number;
  bytes: number;
  /** Events per second; absent: as fast as 64 publishes in flight go. */
  rate?: number;
  /** Publish to the partitioned subjects (shapePartitionedSubject) of this many partitions. */
  partitions?: number;
  /** Publish every event to this subject instead (one tenant flooding). */
  subject?: string;
}

/** Event subject of endpoint `e`: tenants of ten endpoints, endpoint j of a tenant takes type `e<j>`. */
export const shapeSubject = (e: number) => `events.t${Math.floor(e / 10)}.e${e % 10}`;
/** Endpoint `e`'s tenant's partition: what a subject mapping's partition() would give, spread evenly. */
export const shapePartition = (e: number, partitions: number) => Math.floor(e / 10) % partitions;
/** Endpoint `e`'s event subject with its tenant's partition as the second token (`events.<p>.<tenant>.<type>`). */
export const shapePartitionedSubject = (e: number, partitions: number) => `events.${shapePartition(e, partitions)}.${shapeSubject(e).slice('events.'.length)}`;

if (process.argv[1] === fileURLToPath(import.meta.url)) process.once('message', (order: PublishOrder) => void (async () => {
  const nc = await connect({ servers: order.url });
  const js = jetstream(nc);
  process.send?.('started');
  const body = 'x'.repeat(order.bytes);
  let next = 0;
  const start = performance.now();
  // At a rate, each of the 64 publishers waits until its next event is due.
  const due = (i: number) => (order.rate ? start + (i / order.rate) * 1000 - performance.now() : 0);
  await Promise.all(Array.from({ length: 64 }, async () => {
    for (let i = next++; i < order.count; i = next++) {
      const wait = due(i);
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const e = i % order.endpoints;
      await js.publish(order.subject ?? (order.partitions ? shapePartitionedSubject(e, order.partitions) : shapeSubject(e)), body);
    }
  }));
  await nc.close();
  process.exit(0);
})());
