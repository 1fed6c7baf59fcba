// Fault scenarios on a three-node JetStream cluster (replicas 3) with two hookstream instances: a
// concurrent start on an empty cluster, the loss of a follower, of the EVENTS stream leader, of the meta
// leader, and of one instance, each mid-burst; an ordered endpoint losing its delivery stream's leader. Every delivery must arrive at least once; each scenario
// prints its duplicates and how long deliveries paused.
import test, { type ExecutionContext } from 'ava';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { startNatsCluster, CLUSTER_PASSWORDS, REPLICAS_SUPPORTED, type NatsCluster } from '../helpers/nats-cluster.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { connectNats } from '../../src/nats/connect.ts';
import type { TenantId } from '../../src/domain/ids.ts';
import { deliveryAddress, deliveryStream } from '../../streams/deliveries.ts';
import { createEndpoints } from '../../src/endpoints/index.ts';
import { startReceiver } from '../helpers/receiver.ts';
import { ensureStreams, startupJetStreamManager } from '../../streams/index.ts';
import { FAULT_SHARDS, generateKeys, initSodium, instanceEnv, produceWithFault, settle, startInstance, subscribeEndpoints, type Instance } from './harness.ts';
import { listConsumers } from '../../streams/ensure.ts';

const EVENTS = Number(process.env['FAULT_EVENTS'] ?? 1000);
const ENDPOINTS = 3;

// hookstream refuses replicas on servers below 2.11 (test/cluster-floor.test.ts): the scenarios that run
// instances need a newer server.
const withInstances = REPLICAS_SUPPORTED ? test.serial : test.serial.skip;

type Fault = (ctx: { cluster: NatsCluster; instances: Instance[]; admin: NatsConnection }) => Promise<string>;

async function scenario(t: ExecutionContext, opts: { fault?: Fault; startTogether?: boolean }): Promise<void> {
  await initSodium();
  const keys = generateKeys();
  const cluster = await startNatsCluster();
  const db = await createTestDatabase('faults_cluster').catch(async (e: unknown) => { await cluster.dispose(); throw e; });
  const env = instanceEnv({
    natsUrl: cluster.url, databaseUrl: db.url, keys,
    extra: { NATS_USER: 'service', NATS_PASSWORD: CLUSTER_PASSWORDS.service, HOOKSTREAM_REPLICAS: '3' },
  });
  const instances: Instance[] = [];
  const conns: NatsConnection[] = [];
  try {
    if (opts.startTogether) instances.push(...(await Promise.all([startInstance(env), startInstance(env)])));
    else for (let i = 0; i < 2; i++) instances.push(await startInstance(env));
    const admin = await connectNats({ url: cluster.url, user: 'service', password: CLUSTER_PASSWORDS.service, name: 'fault-admin' });
    conns.push(admin);
    const tenant = `tenant_faults_${Date.now()}` as TenantId;
    const ep = await subscribeEndpoints(admin, keys.masterKey, tenant, ENDPOINTS);
    const producer = await connectNats({ url: cluster.url, user: 'publisher', password: CLUSTER_PASSWORDS.publisher, inboxPrefix: '_INBOX', name: 'fault-producer' });
    conns.push(producer);
    const fault = opts.fault;
    const { stats, faultAt, struck } = await produceWithFault(producer, tenant, EVENTS, fault && (() => fault({ cluster, instances, admin })));
    const what = struck ?? 'no fault';
    const figures = await settle(ep, EVENTS, faultAt, 120_000);
    t.log(`${what}: ${JSON.stringify({ ...figures, producerRetries: stats.failures, producerLongestMs: stats.longestMs })}`);
    await ep.close();
    if (figures.missing > 0) for (const i of instances) t.log(i.output.split('\n').filter((l) => /"level":"(warn|error)"/.test(l)).slice(-10).join('\n'));
    t.is(figures.missing, 0, 'every delivery arrived at least once');
    t.true(instances.some((i) => !i.exited), 'an instance is still running');
  } finally {
    for (const i of instances) await i.kill();
    for (const c of conns) await c.close().catch(() => {});
    await cluster.dispose();
    await db.drop().catch(() => {});
  }
}

const streamLeader = async (admin: NatsConnection, stream: string) => (await (await jetstreamManager(admin)).streams.info(stream)).cluster?.leader;

withInstances('two instances starting at the same moment on an empty cluster', (t) => scenario(t, { startTogether: true }));

withInstances('a follower node killed mid-burst', (t) => scenario(t, {
  fault: async ({ cluster, admin }) => {
    const leaders = new Set([await cluster.metaLeader(), await streamLeader(admin, 'EVENTS')]);
    const victim = cluster.nodes.find((n) => !leaders.has(n.name)) ?? cluster.nodes[0]!;
    await victim.kill();
    return `follower ${victim.name} killed`;
  },
}));

withInstances('the EVENTS stream leader killed mid-burst', (t) => scenario(t, {
  fault: async ({ cluster, admin }) => {
    const name = (await streamLeader(admin, 'EVENTS'))!;
    await cluster.node(name).kill();
    return `EVENTS leader ${name} killed`;
  },
}));

withInstances('the JetStream meta leader killed mid-burst', (t) => scenario(t, {
  fault: async ({ cluster }) => {
    const name = (await cluster.metaLeader())!;
    await cluster.node(name).kill();
    return `meta leader ${name} killed`;
  },
}));

// The node leading an endpoint's consumer (not the meta leader, whose loss is its own scenario): the
// pull that waited there is lost with it. Every instance follows the consumer's leader election and
// pulls again at once (src/nats/consumer-leaders.ts) instead of after two missed 30 s heartbeats.
withInstances('the node leading an endpoint consumer killed mid-burst: the instances pull again at the election', async (t) => {
  let instancesSeen: Instance[] = [];
  await scenario(t, {
    fault: async ({ cluster, admin, instances }) => {
      instancesSeen = instances;
      const jsm = await jetstreamManager(admin);
      const meta = await cluster.metaLeader();
      let victim: string | undefined;
      for (let shard = 0; shard < FAULT_SHARDS && !victim; shard++) {
        for await (const ci of listConsumers(jsm, deliveryStream(shard))) {
          const leader = ci.cluster?.leader;
          if (leader && leader !== meta) { victim = leader; break; }
        }
      }
      const name = victim ?? (await streamLeader(admin, 'EVENTS'))!;
      await cluster.node(name).kill();
      return `endpoint consumer leader ${name} killed`;
    },
  });
  t.true(instancesSeen.some((i) => i.output.includes('pulled again after consumer leader elections')), 'an instance renewed its pulls at the election');
});

withInstances('one of two instances killed mid-burst', (t) => scenario(t, {
  fault: async ({ instances }) => {
    await instances[0]!.kill('SIGKILL');
    return 'instance 1 of 2 killed';
  },
}));

test.serial('start-up on a cluster still gathering its servers waits for them instead of failing', async (t) => {
  // nats-server 2.15.1 once refused three replicas right after its meta leader was agreed (issue 18):
  // played here by starting with one of three servers down and bringing it up a few seconds later. The one
  // down is the meta leader, so start-up also meets the election that follows (CI runs timed out there).
  const cluster = await startNatsCluster();
  try {
    const late = cluster.node(await cluster.waitForMetaLeader());
    await late.stop();
    const nc = await connectNats({ url: cluster.url, user: 'service', password: CLUSTER_PASSWORDS.service, name: 'gathering' });
    try {
      const retries: string[] = [];
      const lateStart = new Promise((r) => setTimeout(r, 3000)).then(() => late.start());
      // As start-up does (src/service.ts): no account check outside the patience of ensureStreams.
      await ensureStreams(await startupJetStreamManager(nc), { shards: 2, maxQueued: 1000, retrySchedule: [1000], replicas: 3, onRetry: (reason) => retries.push(reason) });
      await lateStart;
      // 2.9.10 refuses three replicas with two servers up and start-up waits; 2.15.1 places them at once.
      t.log(`nats-server ${nc.info?.version ?? '?'}: ${retries.length} retries`, retries.slice(0, 2));
      const jsm = await jetstreamManager(nc);
      for await (const si of jsm.streams.list()) t.is(si.config.num_replicas, 3, si.config.name);
    } finally {
      await nc.close();
    }
  } finally {
    await cluster.dispose();
  }
});

// Issue 21 on a cluster: an ordered endpoint (`ordering: key`), each key's events published one after
// the other by its own producer loop, and the node leading the endpoint's delivery stream killed mid-run
// (publishes and fan-outs to it fail until the election; the router retries them after later events of
// their keys were routed). Every key's events arrive in order (first 2xx), none is lost.
withInstances('an ordered endpoint with its delivery stream\'s leader killed mid-run: every key in order, nothing lost', async (t) => {
  const KEYS = 50;
  const PER_KEY = 20;
  await initSodium();
  const keys = generateKeys();
  const cluster = await startNatsCluster();
  const db = await createTestDatabase('faults_cluster_ordered').catch(async (e: unknown) => { await cluster.dispose(); throw e; });
  const env = instanceEnv({
    natsUrl: cluster.url, databaseUrl: db.url, keys, retrySchedule: '5s,5s,10s,20s,40s',
    extra: { NATS_USER: 'service', NATS_PASSWORD: CLUSTER_PASSWORDS.service, HOOKSTREAM_REPLICAS: '3' },
  });
  const instances: Instance[] = [];
  const conns: NatsConnection[] = [];
  const receiver = await startReceiver();
  try {
    for (let i = 0; i < 2; i++) instances.push(await startInstance(env));
    const admin = await connectNats({ url: cluster.url, user: 'service', password: CLUSTER_PASSWORDS.service, name: 'fault-admin' });
    conns.push(admin);
    const tenant = `tenant_faults_ordered_${Date.now()}` as TenantId;
    const { store } = createEndpoints({ js: jetstream(admin), jsm: await jetstreamManager(admin), masterKey: keys.masterKey, allowPrivateTargets: true });
    const { endpoint } = await store.create(tenant, { url: receiver.url, events: ['user.*'], ordering: 'key' });
    const producer = await connectNats({ url: cluster.url, user: 'publisher', password: CLUSTER_PASSWORDS.publisher, inboxPrefix: '_INBOX', name: 'fault-producer' });
    conns.push(producer);
    const js = jetstream(producer, { timeout: 2000 });
    let published = 0;
    let struck: Promise<string> | undefined;
    const strike = async () => {
      const stream = deliveryAddress(endpoint.id, FAULT_SHARDS).stream;
      const name = (await streamLeader(admin, stream))!;
      await cluster.node(name).kill();
      return `${stream} leader ${name} killed`;
    };
    // One producer loop per key: each event acknowledged before the key's next (retried under its id).
    await Promise.all(Array.from({ length: KEYS }, async (_, k) => {
      for (let n = 0; n < PER_KEY; n++) {
        for (let attempt = 0; ; attempt++) {
          try {
            await js.publish(`events.${tenant}.user.updated`, JSON.stringify({ userId: `user_${k}`, n }), { msgID: `ordered-${tenant}-${k}-${n}` });
            break;
          } catch {
            if (attempt > 100) throw new Error(`key ${k} event ${n} not accepted`);
            await new Promise((r) => setTimeout(r, Math.min(1000, 100 * 2 ** attempt)));
          }
        }
        if (++published === (KEYS * PER_KEY * 2) / 5) struck = strike();
      }
    }));
    const what = await struck;
    const firstOk = new Map<string, number[]>();
    const seen = new Set<string>();
    const until = Date.now() + 180_000;
    while (seen.size < KEYS * PER_KEY && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 500));
      firstOk.clear();
      seen.clear();
      for (const g of receiver.received) {
        const id = String(g.headers['webhook-id']);
        if (seen.has(id)) continue;
        seen.add(id);
        const { data } = JSON.parse(g.body) as { data: { userId: string; n: number } };
        firstOk.set(data.userId, [...(firstOk.get(data.userId) ?? []), data.n]);
      }
    }
    t.log(`${what}: ${seen.size} of ${KEYS * PER_KEY} delivered, ${receiver.received.length} requests`);
    t.is(seen.size, KEYS * PER_KEY, 'nothing lost');
    for (let k = 0; k < KEYS; k++) t.deepEqual(firstOk.get(`user_${k}`), Array.from({ length: PER_KEY }, (_, n) => n), `key ${k} in order`);
  } finally {
    await receiver.close();
    for (const i of instances) await i.kill();
    for (const c of conns) await c.close().catch(() => {});
    await cluster.dispose();
    await db.drop().catch(() => {});
  }
});
