// The service's tenantPartition agrees with nats-server's partition() (EVENTS' ingest transform in the
// delivery path's next shape): tenant ids of every allowed shape and length, stored through the real server.
import test from 'ava';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager, type StreamConfig } from '@nats-io/jetstream';
import { startNatsServer } from './helpers/nats-server.ts';
import { tenantPartition } from '../src/domain/partition.ts';

const TENANTS = [
  '0', '7', '42', '0042', 'a', 'Z', '_', '-', 't1', 'tenant_42', 'tenant-42', 'org_2ZxYwV9q',
  'x'.repeat(64), '9'.repeat(64), ...Array.from({ length: 200 }, (_, i) => `tenant_${(i * 7919).toString(36)}`),
];

test('each tenant lands in the partition tenantPartition names, for several partition counts', async (t) => {
  const nats = await startNatsServer();
  const nc = await connect({ servers: nats.url });
  try {
    const jsm = await jetstreamManager(nc);
    const js = jetstream(nc);
    for (const partitions of [1, 7, 16, 64]) {
      const name = `PARTS_${partitions}`;
      await jsm.streams.add({
        name, subjects: [`p${partitions}.>`],
        subject_transform: { src: `p${partitions}.*.>`, dest: `p${partitions}.{{wildcard(1)}}.{{partition(${partitions},1)}}.>` },
      } as StreamConfig);
      for (const tenant of TENANTS) await js.publish(`p${partitions}.${tenant}.user.created`, '{}');
      const wrong: string[] = [];
      for (let seq = 1; seq <= TENANTS.length; seq++) {
        const m = await jsm.streams.getMessage(name, { seq });
        const [, tenant, stored] = m!.subject.split('.');
        if (stored !== String(tenantPartition(tenant!, partitions))) wrong.push(`${tenant}: server ${stored}, service ${tenantPartition(tenant!, partitions)}`);
      }
      t.deepEqual(wrong, [], `${partitions} partitions`);
    }
    // Not a constant: the tenants above spread over 16 partitions.
    t.true(new Set(TENANTS.map((x) => tenantPartition(x, 16))).size > 8);
  } finally {
    await nc.close();
    await nats.dispose();
  }
});
