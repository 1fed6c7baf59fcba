// Fault scenario: a Postgres restart during a burst. One nats-server, a private Postgres server
// (test/helpers/postgres-server.ts, so the machine's Postgres that other tests use is never touched) and a
// real `hookstream serve`. Mid-burst Postgres stops; a few deliveries to a failing endpoint die while it is
// down; then it starts again. Every delivery must arrive at least once (the delivery path never reads
// Postgres), the API must answer again, and each delivery that died must be exactly one dead letter. The
// scenario prints its duplicates, how long deliveries paused, and how long the API and the dead letters
// took to recover.
import test from 'ava';
import pg from 'pg';
import { jetstream } from '@nats-io/jetstream';
import { startNatsServer } from '../helpers/nats-server.ts';
import { startPostgresServer } from '../helpers/postgres-server.ts';
import { apiClient } from '../helpers/api-client.ts';
import { startReceiver } from '../helpers/receiver.ts';
import { connectNats } from '../../src/nats/connect.ts';
import { openDatabase, closeDatabase } from '../../src/db/orm.ts';
import { createApiKey } from '../../src/apikeys/store.ts';
import { createLogger } from '../../src/log.ts';
import type { TenantId } from '../../src/domain/ids.ts';
import { generateKeys, initSodium, instanceEnv, produceWithFault, settle, startInstance, subscribeEndpoints, type Instance } from './harness.ts';

const EVENTS = Number(process.env['FAULT_EVENTS'] ?? 1000);
/** Deliveries to the failing endpoint, published once Postgres is down: each must become one dead letter. */
const DOOMED = 10;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined> | T | undefined): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(100);
  }
}

test.serial('Postgres stopped mid-burst while deliveries die, then started again', async (t) => {
  await initSodium();
  const keys = generateKeys();
  const nats = await startNatsServer();
  const pgServer = await startPostgresServer().catch(async (e: unknown) => { await nats.dispose(); throw e; });
  const dbUrl = pgServer.url('hookstream');
  // Two retries so a failing delivery dies in ~10 s.
  const env = instanceEnv({ natsUrl: nats.url, databaseUrl: dbUrl, keys, retrySchedule: '5s,5s' });
  const instances: Instance[] = [];
  const admin = await connectNats({ url: nats.url, name: 'fault-admin' });
  const producer = await connectNats({ url: nats.url, inboxPrefix: '_INBOX', name: 'fault-producer' });
  const failing = await startReceiver(() => 500);
  try {
    instances.push(await startInstance(env));
    const instance = instances[0]!;
    const apiUrl = await until('the API URL in the log', 10_000, () => {
      const line = instance.output.split('\n').find((l) => l.includes('"msg":"api listening"'));
      return line ? (JSON.parse(line) as { url: string }).url : undefined;
    });
    const tenant = `tenant_faults_pg_${Date.now()}` as TenantId;
    const orm = await openDatabase(dbUrl, createLogger({ level: 'error' }), { poolSize: 1 });
    const { key } = await createApiKey(orm.em.fork(), tenant, 'fault-suite').finally(() => closeDatabase(orm));
    const api = apiClient(apiUrl, key, t);

    const ep = await subscribeEndpoints(admin, keys.masterKey, tenant, 3);
    const created = await api.post('/v1/webhooks', { url: failing.url, events: ['organization.updated'] });
    t.is(created.status, 201, created.text);
    const failingId = String(created.body.id);
    // The projection has all four endpoints before the fault.
    await until('the four endpoints listed', 30_000, async () => {
      const res = await api.get('/v1/webhooks');
      return res.status === 200 && res.body.data.length === 4 ? true : undefined;
    });

    const dlFailuresBefore = () => instance.output.split('dead-lettering failed').length - 1;
    let restartedAt = 0;
    let outageMs = 0;
    let apiDuringOutage = 0;
    const { stats, faultAt } = await produceWithFault(producer, tenant, EVENTS, async (at) => {
      await pgServer.stop('fast');
      const js = jetstream(admin);
      for (let i = 0; i < DOOMED; i++) {
        await js.publish(`events.${tenant}.organization.updated`, JSON.stringify({ organizationId: `org_${i}` }), { msgID: `fault-pg-doomed-${i}` });
      }
      apiDuringOutage = (await api.get('/v1/webhooks')).status;
      // Every attempt made (1 + 2 retries each): the deliveries died, and the dead-letter role failed to store them.
      await failing.waitFor(DOOMED * 3, 60_000);
      await until('the dead-letter role failing while Postgres is down', 20_000, () => (dlFailuresBefore() > 0 ? true : undefined));
      await pgServer.start();
      restartedAt = Date.now();
      outageMs = restartedAt - at;
    });
    t.true(restartedAt > 0, 'Postgres was stopped and started mid-burst');

    const apiRecoveryMs = await until('the API answering 200 after the restart', 30_000, async () => {
      const res = await api.get('/v1/webhooks');
      return res.status === 200 ? Date.now() - restartedAt : undefined;
    });
    const listed = (await api.get('/v1/webhooks')).body.data as { id: string }[];

    const client = new pg.Client({ connectionString: dbUrl });
    await client.connect();
    let deadLetters: { webhook_id: string; dead_count: number; status: string }[] = [];
    try {
      const deadLetterRecoveryMs = await until('every dead letter stored', 30_000, async () => {
        deadLetters = (await client.query('select webhook_id, dead_count, status from dead_letters where endpoint_id = $1', [failingId])).rows;
        return deadLetters.length >= DOOMED ? Date.now() - restartedAt : undefined;
      });
      const figures = await settle(ep, EVENTS, faultAt, 120_000);
      // The settle above gave repeated advisories time to show.
      deadLetters = (await client.query('select webhook_id, dead_count, status from dead_letters where endpoint_id = $1', [failingId])).rows;
      t.log(`Postgres stopped mid-burst for ${outageMs} ms: ${JSON.stringify({
        ...figures, apiDuringOutage, apiRecoveryMs, deadLetters: deadLetters.length, deadLetterRecoveryMs,
        producerRetries: stats.failures, producerLongestMs: stats.longestMs,
      })}`);
      await ep.close();
      if (figures.missing > 0) t.log(instance.output.split('\n').filter((l) => /"level":"(warn|error)"/.test(l)).slice(-10).join('\n'));
      t.is(figures.missing, 0, 'every delivery arrived at least once');
    } finally {
      await client.end().catch(() => {});
    }
    t.is(apiDuringOutage, 503, 'the API answered 503 while Postgres was down');
    t.is(listed.length, 4, 'the API lists the four endpoints again');
    t.true(listed.some((e) => e.id === failingId));
    t.is(deadLetters.length, DOOMED, 'one dead letter per delivery that died');
    t.is(new Set(deadLetters.map((d) => d.webhook_id)).size, DOOMED, 'no delivery is two dead letters');
    t.true(deadLetters.every((d) => d.dead_count === 1 && d.status === 'dead'), 'each counted once (a repeated advisory is not another death)');
    t.is(failing.received.length, DOOMED * 3, 'no attempt after the last retry');
    t.false(instance.exited, 'the instance rode out the restart');
  } finally {
    for (const i of instances) await i.kill();
    await failing.close();
    await admin.close().catch(() => {});
    await producer.close().catch(() => {});
    await nats.dispose();
    await pgServer.dispose();
  }
});
