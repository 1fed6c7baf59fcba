// Fault scenarios on one nats-server: the service SIGKILLed mid-burst and NATS restarted 4 s later (the
// compound case of issue 9), then a new instance; and issue 17's order: the service SIGKILLed mid-burst,
// started again, and NATS restarted while it catches up. Every delivery must arrive at least once; each
// scenario prints its duplicates and how long deliveries paused.
import test from 'ava';
import { jetstreamManager } from '@nats-io/jetstream';
import { startNatsServer } from '../helpers/nats-server.ts';
import { createTestDatabase } from '../helpers/database.ts';
import { connectNats } from '../../src/nats/connect.ts';
import type { TenantId } from '../../src/domain/ids.ts';
import { duplicateKinds, generateKeys, initSodium, instanceEnv, produceWithFault, settle, startInstance, subscribeEndpoints, type Instance } from './harness.ts';
import { listConsumers } from '../../streams/ensure.ts';

const EVENTS = Number(process.env['FAULT_EVENTS'] ?? 1000);

interface SingleNode {
  keys: ReturnType<typeof generateKeys>;
  nats: Awaited<ReturnType<typeof startNatsServer>>;
  env: ReturnType<typeof instanceEnv>;
  instances: Instance[];
  admin: Awaited<ReturnType<typeof connectNats>>;
  producer: Awaited<ReturnType<typeof connectNats>>;
}

/** One nats-server, a fresh database and the scenario's clients; everything is removed afterwards. */
async function withSingleNode(label: string, scenario: (s: SingleNode) => Promise<void>): Promise<void> {
  await initSodium();
  const keys = generateKeys();
  const nats = await startNatsServer();
  const db = await createTestDatabase(label).catch(async (e: unknown) => { await nats.dispose(); throw e; });
  const s: SingleNode = {
    keys, nats, env: instanceEnv({ natsUrl: nats.url, databaseUrl: db.url, keys }), instances: [],
    admin: await connectNats({ url: nats.url, name: 'fault-admin' }),
    producer: await connectNats({ url: nats.url, inboxPrefix: '_INBOX', name: 'fault-producer' }),
  };
  try {
    await scenario(s);
  } finally {
    for (const i of s.instances) await i.kill();
    await s.admin.close().catch(() => {});
    await s.producer.close().catch(() => {});
    await nats.dispose();
    await db.drop().catch(() => {});
  }
}

test.serial('the service killed mid-burst, then NATS restarted, then the service started again', (t) =>
  withSingleNode('faults_single', async ({ keys, nats, env, instances, admin, producer }) => {
    instances.push(await startInstance(env));
    const tenant = `tenant_faults_${Date.now()}` as TenantId;
    const ep = await subscribeEndpoints(admin, keys.masterKey, tenant, 3);
    const { stats, faultAt } = await produceWithFault(producer, tenant, EVENTS, async () => {
      await instances[0]!.kill('SIGKILL');
      await new Promise((r) => setTimeout(r, 4000));
      await nats.stop();
      await nats.start();
      instances.push(await startInstance(env));
    });
    const figures = await settle(ep, EVENTS, faultAt, 120_000);
    t.log(`service killed, NATS restarted 4 s later: ${JSON.stringify({ ...figures, producerRetries: stats.failures, producerLongestMs: stats.longestMs })}`);
    await ep.close();
    t.is(figures.missing, 0, 'every delivery arrived at least once');
  }));

test.serial('the service killed mid-burst and started again, then NATS restarted while it catches up', (t) =>
  withSingleNode('faults_compound', async ({ keys, nats, env, instances, admin, producer }) => {
    const events = Math.max(EVENTS, 5000);
    let restartedAt = 0;
    instances.push(await startInstance(env));
    const tenant = `tenant_compound_${Date.now()}` as TenantId;
    const ep = await subscribeEndpoints(admin, keys.masterKey, tenant, 4);
    const { stats, faultAt } = await produceWithFault(producer, tenant, events, async () => {
      await instances[0]!.kill('SIGKILL');
      instances.push(await startInstance(env));
      // The new instance is routing and delivering the backlog when NATS goes away.
      await new Promise((r) => setTimeout(r, 1000));
      await nats.stop();
      restartedAt = Date.now();
      await nats.start();
    });
    const figures = await settle(ep, events, faultAt, 180_000);
    t.log(`compound fault (kill, restart, NATS restart), nats-server ${admin.info?.version ?? '?'}: ${JSON.stringify({ ...figures, producerRetries: stats.failures, ...await duplicateKinds(ep, admin, restartedAt) })}`);
    // What was left where, for a run that lost deliveries.
    if (figures.missing > 0) {
      const jsm = await jetstreamManager(admin);
      for await (const si of jsm.streams.list()) {
        t.log(si.config.name, JSON.stringify({ msgs: si.state.messages, first: si.state.first_seq, last: si.state.last_seq }));
        for await (const ci of listConsumers(jsm, si.config.name)) t.log('  ', ci.name, JSON.stringify({ pending: ci.num_pending, ackPending: ci.num_ack_pending, redelivered: ci.num_redelivered, waiting: ci.num_waiting, delivered: ci.delivered, ackFloor: ci.ack_floor }));
      }
      t.log(instances.at(-1)!.output.slice(-6000));
    }
    await ep.close();
    t.is(figures.missing, 0, 'every delivery arrived at least once');
  }));
