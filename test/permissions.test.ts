// nats.conf enforced by a real nats-server: hookstream runs its worker roles as the `service` user and the
// admin role alone as the narrower `admin` user (account HOOKSTREAM), a producer as `publisher` (account
// PRODUCERS) gets its events delivered but reaches neither admin.> nor the delivery streams (nor the
// service's inbox), the `operator` (account OPERATORS) lists and replays dead letters over admin.>, and the
// `admin` user can do what the admin role does and nothing more. The attacks through reply subjects are in
// security-accounts.test.ts.
import test from 'ava';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { connect } from '@nats-io/transport-node';
import { jetstream, jetstreamManager } from '@nats-io/jetstream';
import { PermissionViolationError, type NatsConnection } from '@nats-io/nats-core';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import { NATS_CONF, useNatsConfPasswords } from './helpers/nats-conf.ts';
import { createTestDatabase, type TestDatabase } from './helpers/database.ts';
import { startReceiver, type Receiver } from './helpers/receiver.ts';
import { eventually } from './helpers/service.ts';
import { operatorClient } from './helpers/fixture.ts';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { startService, type RunningService } from '../src/service.ts';
import { generateKeys, initSodium } from '../src/crypto/sodium.ts';
import { createEndpoints } from '../src/endpoints/index.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { MAX_DELIVERY_SHARDS } from '../streams/deliveries.ts';
import { ensureProducerIdsStream, producerIdSubject } from '../streams/producer-ids.ts';
import { createProducerClaims } from '../src/delivery/producer-claims.ts';
import { scopedProducerId } from '../src/domain/producer-id.ts';
import { createAckedPublisher } from '../src/nats/acked-publisher.ts';
import { createNextBySubject } from '../src/nats/next-by-subject.ts';
import { SERVICE_INBOX_PREFIX } from '../src/nats/connect.ts';
import { directDeliveryDefaults } from './helpers/direct-env.ts';
import { DELIVERY_INSTANCES_PREFIX, startDeliveryInstances } from '../src/delivery/delivery-instances.ts';

let PASSWORDS: { publisher: string; service: string; operator: string; admin: string };

let nats: NatsServer;
let db: TestDatabase;
let service: RunningService;
let adminService: RunningService;
let publisher: NatsConnection;
let operatorNc: NatsConnection;
let admin: AdminClient;
let r: Receiver;
let healthy = true;
let masterKey = '';

/** The error a refused operation ends with: nats.js reports the server's permission violation. */
const violation = (e: unknown): PermissionViolationError | undefined =>
  e instanceof PermissionViolationError ? e : e instanceof Error && e.cause instanceof PermissionViolationError ? e.cause : undefined;

const refused = async (p: Promise<unknown>): Promise<PermissionViolationError | undefined> => {
  try {
    await p;
    return undefined;
  } catch (e) {
    return violation(e);
  }
};

test.before(async () => {
  await initSodium();
  // nats-server reads the passwords nats.conf names from its environment.
  const all = useNatsConfPasswords();
  PASSWORDS = { publisher: all.user('publisher'), service: all.user('service'), operator: all.user('operator'), admin: all.user('admin') };
  nats = await startNatsServer({ config: NATS_CONF });
  db = await createTestDatabase('permissions');
  const keys = generateKeys();
  masterKey = keys.masterKey;
  // With TEST_DIRECT_DELIVERY=1 the service user also reads the partition streams and claims producer ids.
  const env = {
    ...directDeliveryDefaults(),
    NATS_URL: nats.url, DATABASE_URL: db.url, PORT: '0', OPS_PORT: '0', CONSOLE_PORT: '0',
    HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1', HOOKSTREAM_DELIVERY_SHARDS: '2', HOOKSTREAM_RETRY_SCHEDULE: '300ms,600ms',
    HOOKSTREAM_MASTER_KEY: keys.masterKey, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: keys.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: keys.deadLetterSecretKey, HOOKSTREAM_LOG_LEVEL: process.env['TEST_LOG_LEVEL'] ?? 'error',
  };
  const config = loadConfig({ ...env, NATS_USER: 'service', NATS_PASSWORD: PASSWORDS.service, HOOKSTREAM_ROLES: 'api,router,delivery,deadletter,projector' });
  service = await startService(config, createLogger({ level: config.logLevel }));
  // The admin role apart, as README "Running the roles apart" runs it: every admin request goes through it.
  const adminConfig = loadConfig({ ...env, NATS_USER: 'admin', NATS_PASSWORD: PASSWORDS.admin, HOOKSTREAM_ROLES: 'admin' });
  adminService = await startService(adminConfig, createLogger({ level: adminConfig.logLevel }));
  publisher = await connect({ servers: nats.url, user: 'publisher', pass: PASSWORDS.publisher });
  ({ nc: operatorNc, admin } = await operatorClient(nats.url, { user: 'operator', password: PASSWORDS.operator, timeoutMs: 20_000 }));
  r = await startReceiver(() => (healthy ? 200 : 500));
});

test.after.always(async () => {
  await publisher?.close();
  await operatorNc?.close();
  await adminService?.stop();
  await service?.stop();
  await r?.close();
  await nats?.dispose();
  await db?.drop();
});

const store = () => createEndpoints({ js: service.js, jsm: service.jsm, masterKey, allowPrivateTargets: true }).store;

test.serial('the workers run as `service`, the admin role as `admin`; a publisher\'s event is delivered, its dead letter shown and replayed by the operator', async (t) => {
  const tenant = 'tenant_perm' as TenantId;
  const { endpoint } = await store().create(tenant, { url: r.url, events: ['user.*'] });
  const ack = await jetstream(publisher).publish(`events.${tenant}.user.created`, JSON.stringify({ userId: 'user_p' }));
  t.is(ack.stream, 'EVENTS', 'the publisher gets its JetStream ack');
  const [got] = await r.waitFor(1);
  t.deepEqual(JSON.parse(got!.body), { type: 'user.created', data: { userId: 'user_p' } });

  healthy = false;
  await jetstream(publisher).publish(`events.${tenant}.user.banned`, JSON.stringify({ userId: 'user_q' }));
  const [letter] = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint: endpoint.id });
    return page.data.length ? page.data : undefined;
  }, 30_000, 'dead letter via the operator');
  t.is((await admin.showDeadLetter({ id: letter!.id })).tag, 'current');
  t.is((await admin.showDelivery({ webhook_id: letter!.webhook_id, endpoint: endpoint.id })).state, 'dead');
  t.like(await admin.retryNow({ endpoint: endpoint.id }), { endpoint_id: endpoint.id });
  t.true((await admin.listEndpoints({ tenant })).data.some((e) => e.id === endpoint.id));
  t.true((await admin.overview()).dead_letters_24h >= 1, 'the console\'s overview (stream and consumer reads)');
  healthy = true;
  const before = r.received.length;
  const replay = await admin.replayDeadLetter({ id: letter!.id });
  t.is(replay.dead_letter.status, 'replayed');
  const all = await r.waitFor(before + 1);
  t.is(all[before]!.headers['webhook-id'], letter!.webhook_id);
  // Erasure (issue 22) as the admin user: single-message deletes of EVENTS and ERASURE_INDEX, the dead letter's row.
  const erased = await admin.eraseSubject({ tenant, user: 'user_q' });
  // With the user's data key (DATA_KEYS), which the admin user may delete and tell every process to forget.
  t.like(erased.stores, { data_keys: { destroyed: 1 }, events: { erased: 1 }, dead_letters: { erased: 1 }, index: { entries: 1, erased: 1 } });
  t.is((await admin.listDeadLetters({ endpoint: endpoint.id })).data.length, 0);
});

test.serial('the admin user cannot change or remove a stream, a consumer or a message but a payload (erasure), write anything but a replay, or read deliveries as they flow', async (t) => {
  // Issue 23, from the attacker's side: someone holding the admin role's NATS credential.
  // On the service's inbox prefix, which the admin user may read: what is refused is the request itself.
  const nc = await connect({ servers: nats.url, user: 'admin', pass: PASSWORDS.admin, inboxPrefix: '_INBOX_hookstream' });
  t.teardown(() => nc.close());
  const counts = async () => Object.fromEntries(await Promise.all(['EVENTS', 'ENDPOINTS', 'REJECTED', 'DELIVERIES_0', 'DELIVERIES_1', 'ATTEMPTS'].map(
    async (name) => [name, (await service.jsm.streams.info(name)).state.last_seq] as const)));
  const before = await counts();
  const routerBefore = await service.jsm.consumers.info('EVENTS', 'router');
  const api: [string, string][] = [
    ['$JS.API.STREAM.PURGE.REJECTED', '{}'],
    ['$JS.API.STREAM.PURGE.ENDPOINTS', '{}'],
    ['$JS.API.STREAM.DELETE.EVENTS', ''],
    ['$JS.API.STREAM.MSG.DELETE.ENDPOINTS', '{"seq":1}'],
    ['$JS.API.STREAM.MSG.DELETE.ROUTED', '{"seq":1}'],
    // Message deletes are allowed by stream name: rate tokens, the other state, shards past the largest
    // HOOKSTREAM_DELIVERY_SHARDS and any stream added later are refused.
    ...['RATE_LIMIT_1', 'RATE_LIMIT_10000', 'ENDPOINT_SNAPSHOTS', 'ENDPOINT_STATES', 'ENDPOINT_HEALTH', 'OPS', 'DEAD_LETTER_ADVISORIES', `DELIVERIES_${MAX_DELIVERY_SHARDS}`, 'STOLEN']
      .map((name): [string, string] => [`$JS.API.STREAM.MSG.DELETE.${name}`, '{"seq":1}']),
    ['$JS.API.STREAM.PURGE.ATTEMPTS', '{}'],
    ['$JS.API.STREAM.UPDATE.EVENTS', '{"name":"EVENTS","subjects":["events.>"],"max_age":1000000000}'],
    ['$JS.API.STREAM.CREATE.STOLEN', '{"name":"STOLEN","subjects":["stolen.>"]}'],
    ['$JS.API.CONSUMER.DELETE.EVENTS.router', ''],
    ['$JS.API.CONSUMER.DURABLE.CREATE.DELIVERIES_0.spy', '{"stream_name":"DELIVERIES_0","config":{"durable_name":"spy","ack_policy":"explicit"}}'],
    ['$JS.API.CONSUMER.MSG.NEXT.EVENTS.router', '{"batch":1}'],
    ['$JS.ACK.EVENTS.router.1.1.1.0.0', ''],
  ];
  for (const [subject, body] of api) t.is((await refused(nc.request(subject, body, { timeout: 5000 })))?.operation, 'publish', subject);
  const writes = [
    'events.tenant_perm.user.deleted', 'endpoints.webhook_forged', 'endpoint_states.webhook_forged', 'attempts.webhook_x.msg_x', 'rejected.tenant_perm',
    'ops.tenant_perm.endpoint.disabled', 'endpoint_health.webhook_x', 'rate_limit.1.webhook_x', 'routed.1', 'admin.dead_letters.list',
    'data_keys.tenant_perm.tenant',
  ];
  for (const subject of writes) t.is((await refused(nc.request(subject, '{}', { timeout: 5000 })))?.operation, 'publish', subject);
  for (const subject of ['deliveries.>', 'attempts.>', 'events.>', 'ops.>', '_INBOX.>', '$JS.EVENT.>', '>']) {
    const sub = nc.subscribe(subject);
    t.is(violation(await sub.closed)?.operation, 'subscription', subject);
  }
  t.deepEqual(await counts(), before, 'no stream changed');
  const routerAfter = await service.jsm.consumers.info('EVENTS', 'router');
  t.is(routerAfter.ack_floor.stream_seq, routerBefore.ack_floor.stream_seq, 'the router\'s consumer is intact');
  // What the admin role needs still works on this connection: JetStream itself answers its deletes in the
  // stores erasure clears (here: no such message, or no such stream beyond this server's two shards).
  for (const name of ['EVENTS', 'REJECTED', 'ATTEMPTS', 'ERASURE_INDEX', 'DATA_KEYS', 'DELIVERIES_0', `DELIVERIES_${MAX_DELIVERY_SHARDS - 1}`]) {
    const answer = await nc.request(`$JS.API.STREAM.MSG.DELETE.${name}`, '{"seq":999999999}', { timeout: 5000 });
    t.is(answer.json<{ type: string }>().type, 'io.nats.jetstream.api.v1.stream_msg_delete_response', name);
  }
  const jsm = await jetstreamManager(nc);
  t.is((await jsm.streams.info('REJECTED')).config.name, 'REJECTED');
  // And the admin process is ready, its metrics (backlogs: consumer listings) served.
  t.is((await fetch(`${adminService.opsUrl}/readyz`)).status, 200);
  t.regex(await (await fetch(`${adminService.opsUrl}/metrics`)).text(), /hookstream_endpoint_backlog_pending/);
});

test.serial('`hookstream events publish` works with the publisher credential, as the README tells producers', async (t) => {
  const tenant = 'tenant_perm_cli' as TenantId;
  const rc = await startReceiver(() => 200);
  t.teardown(() => rc.close());
  await store().create(tenant, { url: rc.url, events: ['user.*'] });
  const bin = fileURLToPath(new URL('../bin/hookstream', import.meta.url));
  const run = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(bin, ['events', 'publish', '--tenant', tenant, '--type', 'user.created', '--data', '{"userId":"user_cli"}', '--json'], {
      env: { ...process.env, NATS_URL: nats.url, NATS_USER: 'publisher', NATS_PASSWORD: PASSWORDS.publisher },
      timeout: 60_000,
    }, (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr }));
  });
  t.is(run.code, 0, run.stderr);
  t.is((JSON.parse(run.stdout) as { stream: string }).stream, 'EVENTS');
  const [got] = await rc.waitFor(1);
  t.deepEqual(JSON.parse(got!.body), { type: 'user.created', data: { userId: 'user_cli' } });
});

test.serial('the service user claims producer ids (direct delivery\'s PRODUCER_IDS stream); the publisher cannot', async (t) => {
  const nc = await connect({ servers: nats.url, user: 'service', pass: PASSWORDS.service, inboxPrefix: SERVICE_INBOX_PREFIX });
  const acked = createAckedPublisher(nc, { timeoutMs: 5000, inboxPrefix: SERVICE_INBOX_PREFIX });
  const reads = createNextBySubject(nc, { timeoutMs: 5000, inboxPrefix: SERVICE_INBOX_PREFIX });
  t.teardown(async () => { acked.close(); reads.close(); await nc.close(); });
  await ensureProducerIdsStream(await jetstreamManager(nc));
  const warned: string[] = [];
  const claims = createProducerClaims({ publisher: acked, reads, log: createLogger({ write: (l) => void warned.push(l) }) });
  const id = scopedProducerId('tenant_perm', 'order-1');
  t.is(await claims.holder(id, 7), 7);
  t.is(await createProducerClaims({ publisher: acked, reads, log: createLogger({ write: (l) => void warned.push(l) }) }).holder(id, 9), 7, 'read back from the mark');
  t.deepEqual(warned, [], 'claimed, not sent for want of a claim');
  t.truthy(await refused(jetstream(publisher).publish(producerIdSubject(id), '', { timeout: 5000 })), 'a producer cannot claim an id');
});

test.serial('delivery instances hear each other as the service user (a tenant\'s rate is shared by them); a producer cannot pose as one', async (t) => {
  const log = createLogger({ write: () => {} });
  const ncs = await Promise.all([1, 2].map(() => connect({ servers: nats.url, user: 'service', pass: PASSWORDS.service, inboxPrefix: SERVICE_INBOX_PREFIX })));
  const [a, b] = ncs.map((nc) => startDeliveryInstances({ nc, log, heartbeatMs: 200 }));
  t.teardown(async () => { a!.stop(); b!.stop(); await Promise.all(ncs.map((nc) => nc.close())); });
  await eventually(() => (a!.count() === 2 && b!.count() === 2) || undefined, 5000, 'each to hear the other');
  // Forged heartbeats from the producers' account: refused there, and never heard in the service's.
  for (let i = 0; i < 20; i++) publisher.publish(`${DELIVERY_INSTANCES_PREFIX}${i.toString(16).padStart(16, '0')}`);
  await publisher.flush().catch(() => {});
  await new Promise((r) => setTimeout(r, 500));
  t.is(a!.count(), 2, 'no producer counts as an instance');
  b!.stop();
  t.is(a!.count(), 2, 'still counted within its last heartbeats');
  await eventually(() => a!.count() === 1 || undefined, 5000, 'the stopped instance to be forgotten');
  t.pass('a stopped instance is forgotten after its heartbeats stop');
});

test('the publisher cannot reach admin.>', async (t) => {
  const e = await refused(publisher.request('admin.dead_letters.list', '{}', { timeout: 5000 }));
  t.truthy(e);
  t.is(e?.operation, 'publish');
  const sub = publisher.subscribe('admin.>');
  t.is(violation(await sub.closed)?.operation, 'subscription', 'nor listen to admin requests');
});

test('the publisher cannot reach the delivery streams, their messages or the service\'s inbox', async (t) => {
  const js = jetstream(publisher);
  const before = (await service.jsm.streams.info('DELIVERIES_0')).state.messages;
  t.truthy(await refused(js.publish('deliveries.0.webhook_forged', '{"type":"user.created","data":{}}', { timeout: 5000 })), 'no publishing into a work queue');
  t.is((await service.jsm.streams.info('DELIVERIES_0')).state.messages, before);
  t.truthy(await refused(jetstreamManager(publisher)), 'no JetStream API: no consumers, no message reads');
  t.truthy(await refused(publisher.request('$JS.API.STREAM.MSG.GET.DELIVERIES_0', '{"seq":1}', { timeout: 5000 })));
  for (const subject of ['deliveries.>', '_INBOX_hookstream.>', 'attempts.>', '$JS.API.>', '_INBOX_operator.>']) {
    const sub = publisher.subscribe(subject);
    t.is(violation(await sub.closed)?.operation, 'subscription', subject);
  }
});

test('the operator can use admin.> only', async (t) => {
  t.truthy(await refused(jetstreamManager(operatorNc)), 'no JetStream API');
  t.truthy(await refused(operatorNc.request('events.tenant_perm.user.created', '{}', { timeout: 5000 })), 'no publishing events');
  const sub = operatorNc.subscribe('_INBOX_hookstream.>');
  t.is(violation(await sub.closed)?.operation, 'subscription');
});

test.serial('the operator on the default _INBOX prefix (the nats CLI) is answered; a producer on _INBOX.> sees nothing of it', async (t) => {
  // Both use `_INBOX.…` replies: only the account boundary keeps the opened dead letters from producers.
  const overheard: string[] = [];
  const sub = publisher.subscribe('_INBOX.>', { callback: (_e, m) => { overheard.push(m.subject); } });
  await publisher.flush();
  const plain = await connect({ servers: nats.url, user: 'operator', pass: PASSWORDS.operator });
  try {
    const reply = await plain.request('admin.dead_letters.list', '{}', { timeout: 20_000 });
    t.regex(reply.subject, /^_INBOX\./);
    t.true(Array.isArray(reply.json<{ data: unknown[] }>().data));
    await plain.flush();
    await publisher.flush();
    t.deepEqual(overheard, []);
  } finally {
    sub.unsubscribe();
    await plain.close();
  }
});

test('nobody gets in without a user', async (t) => {
  const e = await connect({ servers: nats.url, reconnect: false }).then(() => undefined, (x: unknown) => x);
  t.true(e instanceof Error && /Authorization Violation/.test(e.message));
});
