// What erasure leaves on a three-node cluster (replicas 3), read as an auditor would: every file of every
// node's store directory, for each erased event's unique marker and for the sealed value of the user's data
// key. Delivery bodies are sealed (src/erasure/data-keys.ts), so no delivery stream holds a marker in plain
// text on any node; after `erase` the streams' block files hold neither a marker (EVENTS: secure erase) nor
// the key (DATA_KEYS: secure erase) on any node. Each node's raft log of a stream keeps what was written
// until the stream's group snapshots and compacts it: the test waits for that and says how long it took.
// EVENTS is split into partitions (HOOKSTREAM_EVENT_PARTITIONS): each event's copy in its partition stream,
// made by nats-server on every node, goes too (the admin user deleting it as nats.conf allows).
import test from 'ava';
import { readdirSync, readFileSync, type Dirent } from 'node:fs';
import { join, relative } from 'node:path';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { startNatsCluster, CLUSTER_PASSWORDS, REPLICAS_SUPPORTED, CLUSTER_SERVER_VERSION, type NatsCluster } from '../helpers/nats-cluster.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { connectNats } from '../../src/nats/connect.ts';
import type { TenantId } from '../../src/domain/ids.ts';
import { createEndpoints } from '../../src/endpoints/index.ts';
import { startReceiver } from '../helpers/receiver.ts';
import { connectAsOperator, createAdminClient } from '../../src/admin/client.ts';
import { createDataKeys } from '../../src/erasure/data-keys.ts';
import { DATA_KEYS_STREAM } from '../../streams/data-keys.ts';
import { generateKeys, initSodium, instanceEnv, startInstance } from './harness.ts';
import { eventually } from '../helpers/service.ts';

const withInstances = REPLICAS_SUPPORTED ? test.serial : test.serial.skip;

/** The files below `dir`; a file or folder the server removes meanwhile (a raft log compacted) is skipped. */
function filesBelow(dir: string): string[] {
  let entries: Dirent[];
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw e;
  }
  return entries.flatMap((d) => (d.isDirectory() ? filesBelow(join(dir, d.name)) : d.isFile() ? [join(dir, d.name)] : []));
}

/** Files of every node holding `needle`, as `<node>/<path in its store>`. */
function onDisk(cluster: NatsCluster, needle: Uint8Array | string): string[] {
  const bytes = Buffer.from(needle);
  const out: string[] = [];
  for (const node of cluster.nodes) {
    for (const path of filesBelow(node.storeDir)) {
      const content = (() => {
        try {
          return readFileSync(path);
        } catch (e) {
          if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
          throw e;
        }
      })();
      if (content?.includes(bytes)) out.push(`${node.name}/${relative(node.storeDir, path)}`);
    }
  }
  return out;
}
/** A stream's own block files, not a raft log (`$SYS/_js_/…`). */
const inStreamFiles = (files: string[]) => files.filter((f) => !f.includes('/$SYS/') && !f.includes('/_js_/'));

withInstances('erasure on a 3-node cluster: no plain-text copy in a delivery stream on any node; the key gone from every node\'s DATA_KEYS blocks', async (t) => {
  await initSodium();
  const keys = generateKeys();
  const cluster = await startNatsCluster();
  const db = await createTestDatabase('faults_erasure_cluster').catch(async (e: unknown) => { await cluster.dispose(); throw e; });
  const env = instanceEnv({
    natsUrl: cluster.url, databaseUrl: db.url, keys, retrySchedule: '5s',
    extra: { NATS_USER: 'service', NATS_PASSWORD: CLUSTER_PASSWORDS.service, HOOKSTREAM_REPLICAS: '3', HOOKSTREAM_EVENT_PARTITIONS: '4' },
  });
  const instance = await startInstance(env);
  const nc = await connectNats({ url: cluster.url, user: 'service', password: CLUSTER_PASSWORDS.service, name: 'erasure-cluster' });
  const operator = await connectAsOperator({ url: cluster.url, user: 'operator', password: CLUSTER_PASSWORDS.operator });
  const receiver = await startReceiver(() => 204);
  try {
    const js = jetstream(nc);
    const jsm = await jetstreamManager(nc);
    const admin = createAdminClient(operator, { timeoutMs: 120_000 });
    const tenant = `tenant_erase_cluster_${Date.now()}` as TenantId;
    const { store } = createEndpoints({ js, jsm, masterKey: keys.masterKey, allowPrivateTargets: true });
    await store.create(tenant, { url: receiver.url, events: ['*'] });
    const markers = Array.from({ length: 3 }, (_, i) => `CLUSTERMARKER${i}x${Date.now().toString(36)}`);
    const producer = await connectNats({ url: cluster.url, user: 'publisher', password: CLUSTER_PASSWORDS.publisher, inboxPrefix: '_INBOX', name: 'erasure-producer' });
    try {
      for (const note of markers) await jetstream(producer).publish(`events.${tenant}.user.updated`, JSON.stringify({ userId: 'user_cluster', note }));
    } finally {
      await producer.close();
    }
    await receiver.waitFor(markers.length, 60_000);
    t.true(markers.every((m) => receiver.received.some((r) => r.body.includes(m))), 'delivered as JSON');

    // nats-server copies into the partition streams on its own time (seconds on a new cluster).
    const before = await eventually(() => {
      const files = markers.flatMap((m) => onDisk(cluster, m));
      return files.some((f) => /\/EVENTS_\d+\//.test(f)) ? files : undefined;
    }, 60_000, 'the markers in a partition stream');
    t.true(before.some((f) => f.includes('/EVENTS/')), 'in EVENTS as published');
    t.deepEqual(before.filter((f) => f.includes('DELIVERIES_')), [], 'never in plain text in a delivery stream, nor its raft log');
    const dataKeys = createDataKeys({ nc, jsm, masterKey: keys.masterKey });
    t.teardown(() => dataKeys.close());
    const [ref] = await dataKeys.refsOf(tenant, [{ kind: 'user', id: 'user_cluster' }]);
    const key = await jsm.streams.getMessage(DATA_KEYS_STREAM, { last_by_subj: `data_keys.${tenant}.${ref}` });
    // With direct delivery (the service inherits HOOKSTREAM_DIRECT_DELIVERY) no delivery body is stored,
    // so none is sealed and no key made: the events and their partition copies are all there is to erase.
    const direct = process.env['HOOKSTREAM_DIRECT_DELIVERY'] === '1';
    if (direct) t.is(key, null, 'no key: nothing was sealed');
    const keyOnDisk = () => (key ? onDisk(cluster, key.data) : []);
    if (!direct) t.is(new Set(inStreamFiles(keyOnDisk()).map((f) => f.split('/')[0])).size, 3, 'the key on all three nodes');

    const r = await admin.eraseSubject({ tenant, user: 'user_cluster' });
    const erasedAt = Date.now();
    t.like(r.stores, { data_keys: { destroyed: direct ? 0 : 1 }, events: { erased: markers.length }, partition_copies: { erased: markers.length } });
    const plain = markers.flatMap((m) => onDisk(cluster, m));
    t.deepEqual(inStreamFiles(plain), [], 'no marker in any stream\'s blocks on any node');
    t.deepEqual(inStreamFiles(keyOnDisk()), [], 'the key in no stream\'s blocks on any node');
    t.log(`right after erase, in raft logs: markers ${plain.length} files, key ${keyOnDisk().length} files`);
    // The raft logs: until each stream's group compacts its log (minutes, measured before on an idle cluster).
    for (;;) {
      const left = [...markers.flatMap((m) => onDisk(cluster, m)), ...keyOnDisk()];
      if (left.length === 0) break;
      if (Date.now() - erasedAt > 240_000) { t.fail(`still in raft logs after 4 minutes: ${left.join(', ')}`); break; }
      await new Promise((resolve) => setTimeout(resolve, 5000));
    }
    t.log(`nothing left anywhere ${Math.round((Date.now() - erasedAt) / 1000)} s after the erasure (nats-server ${CLUSTER_SERVER_VERSION ?? '?'})`);
  } finally {
    await receiver.close();
    await operator.close().catch(() => {});
    await nc.close().catch(() => {});
    await instance.kill();
    await cluster.dispose();
    await db.drop().catch(() => {});
  }
});
