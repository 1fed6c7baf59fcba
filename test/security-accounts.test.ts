// The attacks of issue 8 (points 1 and 2), made from the attacker's credential against a real nats-server
// running the project's nats.conf: a producer naming a reply subject inside hookstream's account, an
// operator doing the same through the admin role. Each must leave ENDPOINTS, EVENTS and the delivery
// streams as they were, the tenant's endpoint writable, and the tenant's receiver without a webhook.
//
// The server runs nats.conf with users added and nothing else changed (checked below): the README's
// per-tenant producer example uncommented, a spy user in PRODUCERS and OPERATORS that sees where a reply
// lands (proving the ack or answer was sent, into the attacker's own account), and an `insider` in
// HOOKSTREAM allowed to send admin requests (the admin role's own reply check).
import test from 'ava';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect } from '@nats-io/transport-node';
import { jetstream } from '@nats-io/jetstream';
import { PermissionViolationError, type Msg, type NatsConnection } from '@nats-io/nats-core';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import { NATS_CONF, useNatsConfPasswords, type NatsPasswords } from './helpers/nats-conf.ts';
import { createTestDatabase, type TestDatabase } from './helpers/database.ts';
import { startReceiver, type Receiver } from './helpers/receiver.ts';
import { eventually } from './helpers/service.ts';
import { operatorClient } from './helpers/fixture.ts';
import { loadConfig } from '../src/config.ts';
import { createLogger } from '../src/log.ts';
import { startService, type RunningService } from '../src/service.ts';
import { generateKeys, initSodium } from '../src/crypto/sodium.ts';
import { createEndpoints } from '../src/endpoints/index.ts';
import type { EndpointStore } from '../src/endpoints/store.ts';
import type { AdminClient } from '../src/admin/client.ts';
import { deliveryAddress } from '../streams/deliveries.ts';
import { directDeliveryDefaults } from './helpers/direct-env.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';

const SHARDS = 2;
const STREAMS = ['ENDPOINTS', 'EVENTS', 'DELIVERIES_0', 'DELIVERIES_1'] as const;
const VICTIM = 'tenant_victim' as TenantId;
const ATTACKER = 'tenant_attacker' as TenantId;
const DL_TENANT = 'tenant_dl' as TenantId;

/** nats.conf's passwords and those of the users this test adds (set in test.before). */
let passwords: NatsPasswords;

/** nats.conf with the test's users added; fails when the lines it hooks onto have changed. */
function testConfig(): string {
  const original = readFileSync(NATS_CONF, 'utf8');
  const edits: [string, (line: string) => string][] = [
    ['# { user: auth_eu,', (l) => l.replace('# { user: auth_eu,', '{ user: auth_eu,')],
    ['{ user: publisher,', (l) => `${l}\n      { user: spy_producers, password: $SPY_PASSWORD, permissions: { publish: { deny: [">"] }, subscribe: { allow: [">"] } } }`],
    ['{ user: operator,', (l) => `${l}\n      { user: spy_operators, password: $SPY_PASSWORD, permissions: { publish: { deny: [">"] }, subscribe: { allow: [">"] } } }`],
    ['{ user: service,', (l) => `${l}\n      { user: insider, password: $INSIDER_PASSWORD, permissions: { publish: { allow: ["admin.>"] }, subscribe: { allow: ["_INBOX.>"] } } }`],
  ];
  const lines = original.split('\n');
  for (const [marker, edit] of edits) {
    const at = lines.flatMap((l, i) => (l.trim().startsWith(marker) ? [i] : []));
    if (at.length !== 1) throw new Error(`nats.conf: expected one line starting with ${marker}, found ${at.length}`);
    lines[at[0]!] = edit(lines[at[0]!]!);
  }
  return lines.join('\n');
}

let dir: string;
let nats: NatsServer;
let db: TestDatabase;
let service: RunningService;
let store: EndpointStore;
let publisher: NatsConnection;
let authEu: NatsConnection;
let operatorNc: NatsConnection;
let spyProducers: NatsConnection;
let spyOperators: NatsConnection;
let insider: NatsConnection;
let opsReader: NatsConnection;
/** Operational events the ops_reader user received (issue 10). */
const opsSeen: { subject: string; body: string }[] = [];
let admin: AdminClient;
let victimReceiver: Receiver;
let dlReceiver: Receiver;
let victim: EndpointId;
let deadLetterId = '';
const logLines: string[] = [];
/** What each spy saw, by account: subject and body of every message. */
const seen: Record<'PRODUCERS' | 'OPERATORS', { subject: string; body: string }[]> = { PRODUCERS: [], OPERATORS: [] };

const asUser = (user: string, pass: string, inboxPrefix?: string) =>
  connect({ servers: nats.url, user, pass, ...(inboxPrefix ? { inboxPrefix } : {}) });

const spyOn = (nc: NatsConnection, account: keyof typeof seen) => nc.subscribe('>', {
  callback: (_e, m: Msg) => { seen[account].push({ subject: m.subject, body: m.string() }); },
});

type StreamState = Record<string, { messages: number; first_seq: number; last_seq: number }>;
async function streams(): Promise<StreamState> {
  const out: StreamState = {};
  for (const name of STREAMS) {
    const { state } = await service.jsm.streams.info(name);
    out[name] = { messages: state.messages, first_seq: state.first_seq, last_seq: state.last_seq };
  }
  return out;
}

/** The streams once nothing has changed for a while (deliveries and dead-lettering settled). */
async function quiet(): Promise<StreamState> {
  let last = await streams();
  for (let stable = 0; stable < 3;) {
    await new Promise((r) => setTimeout(r, 150));
    const now = await streams();
    stable = JSON.stringify(now) === JSON.stringify(last) ? stable + 1 : 0;
    last = now;
  }
  return last;
}

/** Wait until a spy saw a message land on `subject` in its account, and return its body. */
const landed = (account: keyof typeof seen, subject: string, from: number) =>
  eventually(() => seen[account].slice(from).find((m) => m.subject === subject)?.body, 10_000, `a reply on ${subject} in ${account}`);

const isViolation = (e: unknown) =>
  e instanceof PermissionViolationError || (e instanceof Error && e.cause instanceof PermissionViolationError);

test.before(async () => {
  await initSodium();
  passwords = useNatsConfPasswords(['SPY_PASSWORD', 'INSIDER_PASSWORD']); // nats-server reads them from its environment
  dir = mkdtempSync(join(tmpdir(), 'hookstream-accounts-'));
  const conf = join(dir, 'nats.conf');
  writeFileSync(conf, testConfig());
  nats = await startNatsServer({ config: conf });
  db = await createTestDatabase('security_accounts');
  const keys = generateKeys();
  // With TEST_DIRECT_DELIVERY=1 the service user also reads the partition streams and claims producer ids.
  const config = loadConfig({
    ...directDeliveryDefaults(),
    NATS_URL: nats.url, NATS_USER: 'service', NATS_PASSWORD: passwords.user('service'), DATABASE_URL: db.url,
    PORT: '0', OPS_PORT: '0', CONSOLE_PORT: '0', HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1', HOOKSTREAM_DELIVERY_SHARDS: String(SHARDS),
    HOOKSTREAM_RETRY_SCHEDULE: '200ms,400ms', HOOKSTREAM_MASTER_KEY: keys.masterKey,
    HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: keys.deadLetterPublicKey, HOOKSTREAM_DEAD_LETTER_SECRET_KEY: keys.deadLetterSecretKey,
  });
  service = await startService(config, createLogger({ level: 'warn', write: (l) => logLines.push(l) }));
  store = createEndpoints({ js: service.js, jsm: service.jsm, masterKey: keys.masterKey, allowPrivateTargets: true, partitions: config.eventPartitions }).store;
  publisher = await asUser('publisher', passwords.user('publisher'));
  authEu = await asUser('auth_eu', passwords.user('auth_eu'));
  spyProducers = await asUser('spy_producers', passwords.variable('SPY_PASSWORD'));
  spyOperators = await asUser('spy_operators', passwords.variable('SPY_PASSWORD'));
  spyOn(spyProducers, 'PRODUCERS');
  spyOn(spyOperators, 'OPERATORS');
  await spyProducers.flush();
  await spyOperators.flush();
  insider = await asUser('insider', passwords.variable('INSIDER_PASSWORD'));
  // Subscribed before the dead letter below, whose `message.attempt.exhausted` it must receive.
  opsReader = await asUser('ops_reader', passwords.user('ops_reader'));
  opsReader.subscribe('ops.>', { callback: (_e, m: Msg) => { opsSeen.push({ subject: m.subject, body: m.string() }); } });
  await opsReader.flush();
  ({ nc: operatorNc, admin } = await operatorClient(nats.url, { user: 'operator', password: passwords.user('operator'), timeoutMs: 20_000 }));
  victimReceiver = await startReceiver(() => 200);
  dlReceiver = await startReceiver(() => 500);

  // ENDPOINTS seq 1 is the dead-letter tenant's endpoint, seq 2 the victim's (the MSG.DELETE attack
  // aims at it).
  const dl = await store.create(DL_TENANT, { url: dlReceiver.url, events: ['user.*'] });
  victim = (await store.create(VICTIM, { url: victimReceiver.url, events: ['*'] })).endpoint.id;
  // A dead letter of another tenant, for the admin.dead_letters.show attacks.
  await jetstream(publisher).publish(`events.${DL_TENANT}.user.banned`, JSON.stringify({ userId: 'user_secret' }));
  const [letter] = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint: dl.endpoint.id });
    return page.data.length ? page.data : undefined;
  }, 30_000, 'a dead letter');
  deadLetterId = letter!.id;
});

test.after.always(async () => {
  for (const nc of [publisher, authEu, operatorNc, spyProducers, spyOperators, insider, opsReader]) await nc?.close();
  await service?.stop();
  await victimReceiver?.close();
  await dlReceiver?.close();
  await nats?.dispose();
  await db?.drop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test.serial('the added users change nothing else in nats.conf', (t) => {
  const original = readFileSync(NATS_CONF, 'utf8').split('\n');
  const derived = testConfig().split('\n');
  const kept = original.filter((l) => derived.includes(l));
  const changed = original.filter((l) => !kept.includes(l));
  t.is(changed.length, 1);
  t.true(changed[0]!.trim().startsWith('# { user: auth_eu,'), 'only the example producer is uncommented');
  t.is(derived.length, original.length + 3);
});

// Attack 1: a producer's publish ack sent to a reply subject of the producer's choosing.
const producerReplies = (): [string, string][] => [
  // MSG.DELETE first: the ack `{"stream":"EVENTS","seq":N}` would delete ENDPOINTS seq N, the victim's.
  ['MSG.DELETE of an ENDPOINTS message', '$JS.API.STREAM.MSG.DELETE.ENDPOINTS'],
  ['purge of ENDPOINTS', '$JS.API.STREAM.PURGE.ENDPOINTS'],
  ['purge of a delivery stream', '$JS.API.STREAM.PURGE.DELIVERIES_0'],
  ['an ack stored on another tenant\'s endpoint subject', `endpoints.${victim}`],
  ['an ack stored as another tenant\'s event', `events.${VICTIM}.user.updated`],
  // Issue 17's subjects inside hookstream's account: bringing a tenant's retries forward, using up its rate.
  ['a retry-now of another tenant\'s endpoint', `hookstream.retry_now.${victim}`],
  ['a rate-limit token of another tenant\'s endpoint', `rate_limit.1.${victim}`],
];

test.serial('a producer cannot reach the JetStream API, the endpoint log or another tenant with its reply subject', async (t) => {
  for (const [what, reply] of producerReplies()) {
    const before = await quiet();
    if (reply.includes('MSG.DELETE')) {
      // The attack is only meaningful while the ack's seq names an existing ENDPOINTS message.
      const next = before['EVENTS']!.last_seq + 1;
      t.true(next >= before['ENDPOINTS']!.first_seq && next <= before['ENDPOINTS']!.last_seq, 'the ack would name an endpoint event');
    }
    const from = seen.PRODUCERS.length;
    publisher.publish(`events.${ATTACKER}.user.created`, JSON.stringify({ userId: 'user_attacker' }), { reply });
    // JetStream did store the event and ack it: the ack landed on that subject in PRODUCERS.
    const ack = JSON.parse(await landed('PRODUCERS', reply, from)) as { stream: string; seq: number };
    t.is(ack.stream, 'EVENTS', what);
    const after = await quiet();
    t.deepEqual(after, {
      ...before,
      EVENTS: { ...before['EVENTS']!, messages: before['EVENTS']!.messages + 1, last_seq: ack.seq },
    }, `${what}: only the attacker's own event was added`);
    t.is(ack.seq, before['EVENTS']!.last_seq + 1);
  }
  const replies = new Set(producerReplies().map(([, r]) => r));
  t.deepEqual(seen.PRODUCERS.filter((m) => !/^(events|_INBOX)\./.test(m.subject) && !replies.has(m.subject)), [],
    'the spy shares the publisher\'s account and sees none of hookstream\'s own traffic');
});

// Attack 2: the admin role's answer sent, as the service, to a reply subject of the operator's choosing.
const operatorReplies = (): [string, string][] => [
  ['purge of EVENTS', '$JS.API.STREAM.PURGE.EVENTS'],
  ['a webhook to a tenant', `events.${VICTIM}.user.updated`],
  ['a message in a tenant\'s delivery queue', deliveryAddress(victim, SHARDS).subject],
  ['a retry-now of a tenant\'s endpoint', `hookstream.retry_now.${victim}`],
];

test.serial('an operator cannot make the admin role publish into hookstream\'s account', async (t) => {
  for (const [subject, body, key] of [
    ['admin.dead_letters.list', '{}', 'data'],
    ['admin.dead_letters.show', JSON.stringify({ id: deadLetterId }), 'dead_letter'],
  ] as const) {
    for (const [what, reply] of operatorReplies()) {
      const before = await quiet();
      const from = seen.OPERATORS.length;
      operatorNc.publish(subject, body, { reply });
      // The admin role answered; the answer landed on that subject in OPERATORS, where nothing listens.
      const answer = JSON.parse(await landed('OPERATORS', reply, from)) as Record<string, unknown>;
      t.truthy(answer[key], `${subject} ${what}: the admin role answered`);
      t.deepEqual(await quiet(), before, `${subject} ${what}: streams unchanged`);
    }
  }
  t.is(service.metrics.adminRefused.get({ reason: 'reply_not_inbox' }), 0, 'through the import, replies arrive as _R_');
});

test.serial('inside hookstream\'s account the admin role answers inboxes only', async (t) => {
  const warnings = () => logLines.filter((l) => l.includes('reply subject is not an inbox'));
  const refusedBefore = service.metrics.adminRefused.get({ reason: 'reply_not_inbox' });
  const replies = [...operatorReplies().map(([, r]) => r), `endpoints.${victim}`, '$JS.API.STREAM.MSG.DELETE.ENDPOINTS'];
  const before = await quiet();
  for (const reply of replies) insider.publish('admin.dead_letters.list', '{}', { reply });
  // Requests are taken in order and a refusal is immediate, so once this one is answered all were seen.
  const answer = (await insider.request('admin.dead_letters.list', '{}', { timeout: 10_000 })).json<{ data: unknown[] }>();
  t.true(Array.isArray(answer.data), 'a request with an _INBOX reply is answered');
  t.deepEqual(await quiet(), before, 'streams unchanged');
  t.is(service.metrics.adminRefused.get({ reason: 'reply_not_inbox' }), refusedBefore + replies.length);
  const logged = warnings().map((l) => JSON.parse(l) as Record<string, unknown>);
  t.deepEqual(logged.map((l) => l['reply']), replies);
  t.true(logged.every((l) => l['subject'] === 'admin.dead_letters.list' && l['reason'] === 'reply_not_inbox' && l['level'] === 'warn'));
});

test.serial('the operator\'s CLI client is still answered', async (t) => {
  const page = await admin.listDeadLetters({ tenant: DL_TENANT });
  t.is(page.data.length, 1);
  const shown = await admin.showDeadLetter({ id: deadLetterId });
  t.like(shown.message.body, { data: { userId: 'user_secret' } });
});

test.serial('ops_reader receives the operational events through the ops.> export and may publish nothing', async (t) => {
  const got = await eventually(() => opsSeen.find((m) => m.subject === `ops.${DL_TENANT}.message.attempt.exhausted`), 10_000, 'the exhausted event');
  const event = JSON.parse(got.body);
  t.deepEqual(Object.keys(event).sort(), ['at', 'attempts', 'dead_letter_id', 'endpoint', 'event_type', 'last_error', 'last_status', 'tenant', 'type', 'v', 'webhook_id']);
  t.like(event, { v: 1, type: 'message.attempt.exhausted', tenant: DL_TENANT, event_type: 'user.banned', attempts: 3, last_status: 500, dead_letter_id: deadLetterId });
  t.true(opsSeen.every((m) => m.subject.startsWith('ops.')), 'nothing but ops events');
  // Not even its own subjects, and not the JetStream API (no stream to read, purge or delete from).
  for (const subject of [`ops.${VICTIM}.endpoint.disabled`, '$JS.API.STREAM.PURGE.OPS', '$JS.API.STREAM.INFO.OPS']) {
    const e = await jetstream(opsReader).publish(subject, '{}', { timeout: 3000 }).then(() => undefined, (x: unknown) => x);
    t.true(isViolation(e), `publishing to ${subject} is a permission violation`);
  }
  const { state } = await service.jsm.streams.info('OPS');
  t.true(state.messages >= 1, 'the event is kept in OPS for readers that were away');
});

test.serial('a producer limited to its own tenants cannot publish for another', async (t) => {
  const before = await quiet();
  const js = jetstream(authEu);
  const own = await js.publish('events.tenant_42.user.created', JSON.stringify({ userId: 'user_42' }));
  t.is(own.stream, 'EVENTS');
  const e = await js.publish(`events.${VICTIM}.user.created`, JSON.stringify({ userId: 'user_forged' }), { timeout: 5000 }).then(() => undefined, (x: unknown) => x);
  t.true(isViolation(e), 'publishing for another tenant is a permission violation');
  const after = await quiet();
  t.deepEqual(after, { ...before, EVENTS: { ...before['EVENTS']!, messages: before['EVENTS']!.messages + 1, last_seq: own.seq } });
});

test.serial('after every attack the victim\'s endpoint is intact and the only webhook it got is a real event', async (t) => {
  const state = await store.get(VICTIM, victim);
  t.is(state.version, 2, 'its created event is still ENDPOINTS seq 2, and nothing was stored after it');
  const updated = await store.update(VICTIM, victim, { description: 'after the attacks' });
  t.is(updated.endpoint.description, 'after the attacks');
  await store.rotateSecret(VICTIM, victim, 0);
  t.is(victimReceiver.received.length, 0, 'no webhook from the attacks');
  await jetstream(publisher).publish(`events.${VICTIM}.user.created`, JSON.stringify({ userId: 'user_real' }));
  const [got] = await victimReceiver.waitFor(1);
  t.deepEqual(JSON.parse(got!.body), { type: 'user.created', data: { userId: 'user_real' } });
  await new Promise((r) => setTimeout(r, 500));
  t.is(victimReceiver.received.length, 1);
  await store.delete(VICTIM, victim);
});
