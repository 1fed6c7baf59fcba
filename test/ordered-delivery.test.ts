// Ordered delivery per key (issue 21), with real NATS, Postgres and HTTP receivers on loopback: each key's
// events reach an endpoint with `ordering: key` in order (by first 2xx) across two delivery instances and
// a restart, a failing head holds back only its key, a dead head releases it, and unkeyed events are not
// held at all. Serial: the tests share one service and its second delivery instance.
import test, { type ExecutionContext } from 'ava';
import { headers as natsHeaders, type Msg } from '@nats-io/nats-core';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { storedEventSubject } from './helpers/direct-env.ts';
import { runCli } from './helpers/cli.ts';
import { createNextBySubject, NextBySubjectError, readDirect } from '../src/nats/next-by-subject.ts';
import type { Received } from './helpers/receiver.ts';
import { startService, type RunningService } from '../src/service.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { isOrderingKey, orderingKeyOf, orderingToken, ORDERING_KEY_HEADER } from '../src/domain/ordering-key.ts';
import { consumerEndpoint, deliveryAddress, DeliveryHeader, deliveryStream, isEndpointSubject, keyedConsumerName, keyedSubject } from '../streams/deliveries.ts';
import { listConsumers } from '../streams/ensure.ts';

// Steps longer than the gate's first look (250 ms), short enough for a dead letter in ~10 s.
const SCHEDULE = '1s,2s,2s,2s,2s';

let h: TestService;
let second: RunningService | undefined;

test.before(async () => {
  h = await startTestService('ordered', { HOOKSTREAM_RETRY_SCHEDULE: SCHEDULE, HOOKSTREAM_ATTEMPT_TIMEOUT: '5s' });
  // A second delivery instance on the same NATS and database.
  second = await startService({ ...h.config, roles: ['delivery'] }, h.log);
});

test.after.always(async () => {
  await second?.stop();
  await h?.closeAll();
});

interface Body { type: string; data: { userId?: string; n?: number; key?: string } }
const bodyOf = (r: Received) => JSON.parse(r.body) as Body;
const idOf = (r: Received) => String(r.headers['webhook-id']);

/**
 * A receiver failing 20 % of first attempts at random; per key (userId), the event numbers in the order
 * it answered them 2xx for the first time.
 */
async function flakyReceiver(delayMs = 0) {
  const seen = new Set<string>();
  const firstOk = new Map<string, number[]>();
  let answered = 0;
  const r = await h.receiver((req) => {
    const id = idOf(req);
    const first = !seen.has(id);
    seen.add(id);
    if (first && Math.random() < 0.2) return 500;
    const { data } = bodyOf(req);
    const list = firstOk.get(data.userId!) ?? [];
    if (!list.includes(data.n!)) { list.push(data.n!); answered++; }
    firstOk.set(data.userId!, list);
    return { status: 200, delayMs };
  });
  return { r, firstOk, answered: () => answered };
}

test('the key of an event: the header, else userId or organizationId of identity events, else none', (t) => {
  t.deepEqual(orderingKeyOf('user.updated', { userId: 'user_1' }, undefined), { ok: true, key: 'user_1' });
  t.deepEqual(orderingKeyOf('organizationMembership.deleted', { organizationId: 'org_1', userId: 'user_1' }, undefined), { ok: true, key: 'org_1' });
  t.deepEqual(orderingKeyOf('organization.auth_policy.updated', { organizationId: 'org_2' }, undefined), { ok: true, key: 'org_2' });
  t.deepEqual(orderingKeyOf('organizationInvitation.created', { organizationId: 'org_3' }, undefined), { ok: true, key: 'org_3' });
  t.deepEqual(orderingKeyOf('user.updated', { userId: 'user_1' }, 'invoice 7'), { ok: true, key: 'invoice 7' });
  t.deepEqual(orderingKeyOf('connection.saml_certificate_renewed', { organizationId: 'org_1' }, undefined), { ok: true, key: undefined });
  t.deepEqual(orderingKeyOf('user.updated', { userId: 42 }, undefined), { ok: true, key: undefined }, 'not a key: unordered');
  for (const bad of ['', 'x'.repeat(129), 'line\nbreak', 'ünï']) t.false(orderingKeyOf('user.updated', {}, bad).ok, JSON.stringify(bad));
  t.true(isOrderingKey('x'.repeat(128)));
  // Stable, subject-safe, and per tenant.
  t.regex(orderingToken('t1', 'user_1'), /^[a-z2-7]{26}$/);
  t.is(orderingToken('t1', 'user_1'), orderingToken('t1', 'user_1'));
  t.not(orderingToken('t1', 'user_1'), orderingToken('t2', 'user_1'));
  t.deepEqual(consumerEndpoint(keyedConsumerName('webhook_abc')), { endpoint: 'webhook_abc', keyed: true });
  t.deepEqual(consumerEndpoint('webhook_abc'), { endpoint: 'webhook_abc', keyed: false });
  t.true(isEndpointSubject('deliveries.1.webhook_abc.k.abcdefghijklmnopqrstuvwxyz', 'webhook_abc', 2) === (isEndpointSubject('deliveries.1.webhook_abc', 'webhook_abc', 2)));
  t.false(isEndpointSubject('deliveries.1.webhook_abcd', 'webhook_abc', 2));
});

test.serial('100 keys x 20 events, 20 % of first attempts failing: each key in order across two instances and a restart', async (t) => {
  const KEYS = 100;
  const EVENTS = 20;
  const tenant = 'tenant_order_many';
  const { r, firstOk, answered } = await flakyReceiver();
  await h.store.create(tenant as TenantId, { url: r.url, events: ['user.*'], ordering: 'key' });
  for (let n = 0; n < EVENTS; n++) {
    // Within a key one after the other; across keys at once.
    await Promise.all(Array.from({ length: KEYS }, (_, k) => h.publish(tenant, 'user.updated', { userId: `user_k${k}`, n })));
  }
  await eventually(() => (answered() >= (KEYS * EVENTS) / 3 ? true : undefined), 60_000, 'a third of the deliveries');
  await h.restart();
  await eventually(() => (answered() === KEYS * EVENTS ? true : undefined), 120_000, `every delivery (${answered()} so far)`);
  const inOrder = Array.from({ length: EVENTS }, (_, n) => n);
  const out = Array.from({ length: KEYS }, (_, k) => `user_k${k}`).filter((k) => JSON.stringify(firstOk.get(k)) !== JSON.stringify(inOrder));
  for (const k of out) t.log(`${k} out of order: ${firstOk.get(k)!.join(' ')}`);
  t.deepEqual(out, [], 'every key in order');
  t.log(`${r.received.length} requests for ${KEYS * EVENTS} events`);
});

test.serial('a failing head holds back only its key; other keys and unkeyed events go on; it is not attempted twice at once', async (t) => {
  const tenant = 'tenant_order_head';
  let failUntil = Infinity;
  const r = await h.receiver((req) => {
    const { data } = bodyOf(req);
    return data.userId === 'user_stuck' && data.n === 0 && Date.now() < failUntil ? 500 : 200;
  });
  await h.store.create(tenant as TenantId, { url: r.url, events: ['*'], ordering: 'key' });
  for (let n = 0; n < 5; n++) await h.publish(tenant, 'user.updated', { userId: 'user_stuck', n });
  // The head's first attempt failed: the rest of its key is behind it.
  await eventually(() => (r.received.some((x) => bodyOf(x).data.userId === 'user_stuck') ? true : undefined), 10_000, 'the head\'s first attempt');
  for (let n = 0; n < 5; n++) {
    await h.publish(tenant, 'user.updated', { userId: 'user_free', n });
    await h.publish(tenant, 'connection.saml_certificate_renewed', { n });
  }
  const free = (x: Received) => bodyOf(x).data.userId === 'user_free' || bodyOf(x).type === 'connection.saml_certificate_renewed';
  await eventually(() => (r.received.filter(free).length === 10 ? true : undefined), 10_000, 'the other key and the unkeyed events');
  // Past a retry step of the head (1 s, then 2 s): the key is still held.
  await new Promise((res) => setTimeout(res, 4000));
  const stuck = r.received.filter((x) => bodyOf(x).data.userId === 'user_stuck');
  t.true(stuck.length >= 2, 'the head was retried');
  t.deepEqual([...new Set(stuck.map((x) => bodyOf(x).data.n))], [0], 'nothing after the head was attempted');
  failUntil = 0;
  await eventually(() => (r.received.filter((x) => bodyOf(x).data.userId === 'user_stuck' && bodyOf(x).data.n! > 0).length === 4 ? true : undefined), 20_000, 'the key after its head\'s 2xx');
  const after = r.received.filter((x) => bodyOf(x).data.userId === 'user_stuck').map((x) => bodyOf(x).data.n);
  t.deepEqual(after.slice(after.lastIndexOf(0)), [0, 1, 2, 3, 4], 'in order, each once: waiting used none of their attempts');
  t.is(Math.max(...r.received.filter((x) => bodyOf(x).data.userId === 'user_stuck').map((x) => x.concurrent)), 1);
});

test.serial('a dead head releases its key; the producer\'s header keys events; an invalid header is rejected', async (t) => {
  const tenant = 'tenant_order_dead';
  let healthy = false;
  const r = await h.receiver((req) => (bodyOf(req).data.n === 0 && !healthy ? 500 : 200));
  const { endpoint } = await h.store.create(tenant as TenantId, { url: r.url, events: ['*'], ordering: 'key' });
  const keyed = (key: string) => { const hd = natsHeaders(); hd.set(ORDERING_KEY_HEADER, key); return { headers: hd }; };
  // The same user, but the producer's key: all one key "invoice 7".
  for (let n = 0; n < 4; n++) await h.publish(tenant, 'user.updated', { userId: `user_${n}`, n }, keyed('invoice 7'));
  await h.publish(tenant, 'user.updated', { userId: 'user_x', n: 9 }, keyed('bad\u0001key'));
  // 1 + 1 + 2 x 3 s: the head is dead after ~8 s, then the rest go, in order.
  await eventually(() => (r.received.filter((x) => bodyOf(x).data.n! > 0).length >= 3 ? true : undefined), 40_000, 'the key after its dead head');
  const order = r.received.map((x) => bodyOf(x).data.n);
  t.deepEqual(order.filter((n) => n !== 0), [1, 2, 3]);
  t.is(order.lastIndexOf(0), order.indexOf(1) - 1, 'nothing after the head before it died');
  t.is(order.filter((n) => n === 0).length, 6, 'the head had all its attempts');
  t.false(order.includes(9), 'the event with an invalid key is rejected, not delivered');
  // The dead head replayed: delivered (after the rest of its key, out of order by nature).
  const { admin } = await h.operator({ timeoutMs: 20_000 });
  const letter = await eventually(async () => (await admin.listDeadLetters({ endpoint: endpoint.id })).data[0], 20_000, 'the dead letter');
  healthy = true;
  await admin.replayDeadLetter({ id: letter.id });
  await eventually(() => (r.received.length === 10 ? true : undefined), 10_000, 'the replayed head');
  t.is(bodyOf(r.received[9]!).data.n, 0);
});

test.serial('the command line sets and shows ordering; a wrong value is refused', async (t) => {
  const base: Record<string, string | undefined> = { ...process.env };
  for (const name of Object.keys(base)) if (name.startsWith('HOOKSTREAM_')) delete base[name];
  const cli = (args: string[]) => runCli(args, {
    ...base, NATS_URL: h.nats.url, DATABASE_URL: h.db.url, HOOKSTREAM_DELIVERY_SHARDS: '2', HOOKSTREAM_MASTER_KEY: h.keys.masterKey,
    HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1',
  });
  const created = await cli(['endpoints', 'create', '--json', '--tenant', 'tenant_order_cli', '--url', 'http://127.0.0.1:9/x', '--events', '*', '--ordering', 'key']);
  t.is(created.code, 0, created.stderr);
  const { id, ordering } = JSON.parse(created.stdout) as { id: string; ordering: string };
  t.is(ordering, 'key');
  const updated = await cli(['endpoints', 'update', id, '--tenant', 'tenant_order_cli', '--ordering', 'none']);
  t.is(updated.code, 0, updated.stderr);
  t.regex(updated.stdout, /ordering: +none/);
  const bad = await cli(['endpoints', 'update', id, '--tenant', 'tenant_order_cli', '--ordering', 'fifo']);
  t.not(bad.code, 0);
  t.regex(bad.stderr, /ordering/);
  const published = await cli(['events', 'publish', '--tenant', 'tenant_order_cli', '--type', 'user.updated', '--data', '{}', '--ordering-key', 'invoice 7']);
  t.is(published.code, 0, published.stderr);
  const badKey = await cli(['events', 'publish', '--tenant', 'tenant_order_cli', '--type', 'user.updated', '--data', '{}', '--ordering-key', 'x'.repeat(129)]);
  t.not(badKey.code, 0);
  t.regex(badKey.stderr, /ordering-key/);
});

test.serial('switched back to none: new events unordered, those queued per key still in order; a delete drops the keyed queue and consumer', async (t) => {
  const tenant = 'tenant_order_switch' as TenantId;
  let headFails = true;
  const r = await h.receiver((req) => (bodyOf(req).data.n === 0 && headFails ? 500 : 200));
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['*'], ordering: 'key' });
  for (let n = 0; n < 3; n++) await h.publish(tenant, 'user.updated', { userId: 'user_switch', n });
  await eventually(() => (r.received.length > 0 ? true : undefined), 10_000, 'the head\'s first attempt');
  await h.store.update(tenant, endpoint.id, { ordering: 'none' });
  await h.publish(tenant, 'user.updated', { userId: 'user_switch', n: 3 });
  await eventually(() => (r.received.some((x) => bodyOf(x).data.n === 3) ? true : undefined), 10_000, 'the event after the switch, unordered');
  t.false(r.received.some((x) => [1, 2].includes(bodyOf(x).data.n!)), 'the keyed ones still wait for their head');
  headFails = false;
  await eventually(() => (r.received.filter((x) => [1, 2].includes(bodyOf(x).data.n!)).length === 2 ? true : undefined), 20_000, 'the keyed ones after their head');
  const keyed = r.received.map((x) => bodyOf(x).data.n).filter((n) => n !== 3);
  t.deepEqual(keyed.slice(keyed.lastIndexOf(0)), [0, 1, 2]);

  // Ordered again, a head failing for ever, then deleted: nothing of it stays queued.
  await h.store.update(tenant, endpoint.id, { ordering: 'key' });
  headFails = true;
  const seen = r.received.length;
  for (let n = 0; n < 3; n++) await h.publish(tenant, 'user.updated', { userId: 'user_switch_2', n });
  await eventually(() => (r.received.length > seen ? true : undefined), 10_000, 'the new head\'s attempt');
  await h.store.delete(tenant, endpoint.id);
  const { stream, subject } = deliveryAddress(endpoint.id, h.config.deliveryShards);
  await eventually(async () => {
    const consumers: string[] = [];
    for await (const ci of listConsumers(h.service.jsm, stream)) consumers.push(ci.name);
    const stored = (await h.service.jsm.streams.info(stream, { subjects_filter: `${subject}.>` })).state.subjects ?? {};
    return !consumers.includes(keyedConsumerName(endpoint.id)) && Object.keys(stored).length === 0 ? true : undefined;
  }, 20_000, 'the keyed consumer deleted and its subjects purged');
  t.pass();
});

test.serial('the gate\'s read of a key: the next stored message on a subject with its event sequence, null past the last, an error for a missing stream', async (t) => {
  const heads = createNextBySubject(h.service.nc, { timeoutMs: 5000 });
  t.teardown(() => heads.close());
  const hd = natsHeaders();
  hd.set('Hookstream-Event-Seq', '42');
  const first = await h.service.js.publish('events.tenant_heads.user.updated', '{"userId":"user_heads"}', { headers: hd });
  const second = await h.service.js.publish('events.tenant_heads.user.updated', '{"userId":"user_heads"}');
  // As EVENTS stores it: with partitions, EVENTS' transform puts the partition's token after the tenant.
  const stored = storedEventSubject('tenant_heads', 'user.updated', h.config.eventPartitions);
  t.deepEqual(await heads.next('EVENTS', stored, 0), { seq: first.seq, eventSeq: 42 });
  t.deepEqual(await heads.next('EVENTS', stored, first.seq + 1), { seq: second.seq, eventSeq: undefined });
  t.is(await heads.next('EVENTS', stored, second.seq + 1), null);
  t.is((await heads.next('EVENTS', 'events.tenant_heads.>', 0))?.seq, first.seq, 'wildcards too');
  await t.throwsAsync(heads.next('NO_SUCH_STREAM', 'x', 0), { instanceOf: NextBySubjectError });
});

/** Two deliveries stored on `subject` in the first delivery stream: one with its event sequence header, then one without (purged after the test). */
async function storeKeyedThenPlain(t: ExecutionContext, subject: string, eventSeq: number) {
  const hd = natsHeaders();
  hd.set('Hookstream-Event-Seq', String(eventSeq));
  const keyed = await h.service.js.publish(subject, 'body', { headers: hd });
  const plain = await h.service.js.publish(subject, 'body');
  t.teardown(() => h.service.jsm.streams.purge(deliveryStream(0), { filter: subject }).then(() => {}));
  return [keyed, plain] as const;
}

test.serial('the gate\'s read by direct get (delivery streams without replicas): the same answers, a status for a stream that does not allow it', async (t) => {
  const heads = createNextBySubject(h.service.nc, { timeoutMs: 2000, direct: true });
  const plain = createNextBySubject(h.service.nc, { timeoutMs: 2000 });
  t.teardown(() => { heads.close(); plain.close(); });
  const stream = deliveryStream(0);
  t.true((await h.service.jsm.streams.info(stream)).config.allow_direct, 'the service lets its delivery streams answer direct gets');
  const subject = 'deliveries.0.ep_direct.k.key1';
  const [first, second] = await storeKeyedThenPlain(t, subject, 42);
  for (const reader of [heads, plain]) {
    t.deepEqual(await reader.next(stream, subject, 0), { seq: first.seq, eventSeq: 42 });
    t.deepEqual(await reader.next(stream, subject, first.seq + 1), { seq: second.seq, eventSeq: undefined });
    t.is(await reader.next(stream, subject, second.seq + 1), null);
    t.deepEqual(await reader.at(stream, second.seq), { seq: second.seq, eventSeq: undefined });
    t.deepEqual(await reader.last(stream, subject), { seq: second.seq, eventSeq: undefined });
  }
  await h.service.jsm.streams.deleteMessage(stream, first.seq, false);
  t.is(await heads.at(stream, first.seq), null, 'a removed message is gone at once');
  // EVENTS does not allow direct gets: the read fails (no responders, or no answer), it never says "none".
  await t.throwsAsync(heads.next('EVENTS', 'events.>', 0), { instanceOf: NextBySubjectError });
});

test.serial('a direct get\'s answer reads the same through nats.js\'s header decoder, for a nats.js whose messages no longer show their header block', async (t) => {
  const stream = deliveryStream(0);
  const [keyed, plain] = await storeKeyedThenPlain(t, 'deliveries.0.ep_direct_bare.k.key1', 7);
  // Only what nats.js's Msg type promises: no parser fields (_msg, _rdata) to read the block from.
  const bare = (m: Msg): Msg => ({ subject: m.subject, sid: m.sid, reply: m.reply, data: m.data, headers: m.headers, respond: () => false, json: () => m.json(), string: () => m.string() });
  const ask = (body: object) => h.service.nc.request(`$JS.API.DIRECT.GET.${stream}`, JSON.stringify(body), { timeout: 2000 });
  const answers = { keyed: await ask({ seq: keyed.seq }), plain: await ask({ seq: plain.seq }), none: await ask({ seq: plain.seq + 1000 }) };
  t.deepEqual(readDirect(answers.keyed), { seq: keyed.seq, eventSeq: 7 });
  t.deepEqual(readDirect(answers.plain), { seq: plain.seq, eventSeq: undefined });
  t.is(readDirect(answers.none), null);
  for (const m of Object.values(answers)) t.deepEqual(readDirect(bare(m)), readDirect(m));
  // A status other than 404 is an error, through either reader.
  const bad = await ask({ seq: 0 });
  t.throws(() => readDirect(bad), { instanceOf: NextBySubjectError });
  t.throws(() => readDirect(bare(bad)), { instanceOf: NextBySubjectError });
});

test.serial('with a rate limit: each key still in order, and the limit holds', async (t) => {
  const tenant = 'tenant_order_rate' as TenantId;
  const seenIds = new Set<string>();
  const r = await h.receiver((req) => {
    const id = idOf(req);
    const first = !seenIds.has(id);
    seenIds.add(id);
    return first && bodyOf(req).data.n === 1 ? 500 : 200;
  });
  await h.store.create(tenant, { url: r.url, events: ['user.*'], ordering: 'key', rate_limit: 10 });
  for (let n = 0; n < 5; n++) await Promise.all([0, 1, 2].map((k) => h.publish(tenant, 'user.updated', { userId: `user_rate${k}`, n })));
  await eventually(() => (r.received.length === 18 ? true : undefined), 30_000, 'every delivery and the three retries');
  for (let k = 0; k < 3; k++) {
    const ok = r.received.filter((x, i) => bodyOf(x).data.userId === `user_rate${k}` && !(bodyOf(x).data.n === 1 && r.received.findIndex((y) => idOf(y) === idOf(x)) === i));
    t.deepEqual(ok.map((x) => bodyOf(x).data.n), [0, 1, 2, 3, 4], `key ${k} in order`);
  }
  // At most 10 attempts started in any 1.05 s (the limit's window), seen as receipts: on a loaded machine one
  // POST can take 0.15 s longer to arrive than another (in CI, two came under 1 s apart), while a limit not
  // held would send the 18 within milliseconds.
  const at = r.received.map((x) => x.at).sort((a, b) => a - b);
  for (let i = 10; i < at.length; i++) t.true(at[i]! - at[i - 10]! >= 900, `attempt ${i} ${at[i]! - at[i - 10]!} ms after attempt ${i - 10}`);
});

test.serial('a fan-out NATS failed part-way: its late delivery still goes before the later event of its key', async (t) => {
  const tenant = 'tenant_order_partial' as TenantId;
  const shards = h.config.deliveryShards;
  const ordered = await h.receiver();
  const other = await h.receiver();
  const { endpoint } = await h.store.create(tenant, { url: ordered.url, events: ['user.*'], ordering: 'key' });
  const { stream, subject } = deliveryAddress(endpoint.id, shards);
  // The same event's other endpoint, on another delivery stream: its copy is stored while the ordered one's fails.
  let second: string | undefined;
  while (second === undefined) {
    const { endpoint: e } = await h.store.create(tenant, { url: other.url, events: ['user.*'] });
    if (deliveryAddress(e.id, shards).stream !== stream) second = e.id;
    else await h.store.delete(tenant, e.id);
  }
  // The ordered endpoint's stream refuses its keyed subjects for a while (a stream that stores nothing
  // there: publishes fail as when its leader is down).
  const config = (await h.service.jsm.streams.info(stream)).config;
  await h.service.jsm.streams.update(stream, { ...config, subjects: [subject] });
  try {
    await h.publish(tenant, 'user.updated', { userId: 'user_partial', n: 1 });
    // Routed part-way: the other endpoint has it, the router hands the event back for a retry 1 s later.
    await eventually(() => (other.received.length === 1 ? true : undefined), 10_000, 'the other endpoint\'s copy');
  } finally {
    await h.service.jsm.streams.update(stream, config);
  }
  const later = await h.publish(tenant, 'user.updated', { userId: 'user_partial', n: 2 });
  // Event 2's delivery is stored first on the key's subject; event 1's comes with the router's retry.
  const keyed = keyedSubject(endpoint.id, shards, orderingToken(tenant, 'user_partial'));
  const firstStored = await eventually(async () => (await h.service.jsm.streams.getMessage(stream, { last_by_subj: keyed }).catch(() => null))?.header.get(DeliveryHeader.EventSeq), 10_000, 'a delivery on the key\'s subject');
  t.is(firstStored, String(later.seq), 'stored out of event order');
  await eventually(() => (ordered.received.length === 2 ? true : undefined), 20_000, 'both events at the ordered endpoint');
  t.deepEqual(ordered.received.map((x) => bodyOf(x).data.n), [1, 2], 'in EVENTS order, not in the order they were stored');
  t.is(other.received.filter((x) => bodyOf(x).data.n === 1).length, 1, 'the other endpoint\'s copy was not published again');
});

test.serial('a NATS restart mid-delivery: each key still in order', async (t) => {
  const KEYS = 30;
  const EVENTS = 10;
  const tenant = 'tenant_order_nats';
  const { r, firstOk, answered } = await flakyReceiver(20);
  await h.store.create(tenant as TenantId, { url: r.url, events: ['user.*'], ordering: 'key' });
  for (let n = 0; n < EVENTS; n++) {
    await Promise.all(Array.from({ length: KEYS }, (_, k) => h.publish(tenant, 'user.updated', { userId: `user_n${k}`, n })));
  }
  // Not waiting for the router: a fan-out the restart fails part-way is routed again later, after later
  // events of its key were stored; the gate still orders them by event.
  await eventually(() => (answered() >= (KEYS * EVENTS) / 4 ? true : undefined), 60_000, 'a quarter of the deliveries');
  await h.nats.stop();
  await h.nats.start();
  await eventually(() => (answered() === KEYS * EVENTS ? true : undefined), 120_000, `every delivery after the restart (${answered()} so far)`);
  for (let k = 0; k < KEYS; k++) t.deepEqual(firstOk.get(`user_n${k}`), Array.from({ length: EVENTS }, (_, n) => n), `key ${k} in order`);
});

test("the router does not ask for an ordered endpoint's backlog every second while it is far from its bound", async (t) => {
  const tenant = 'tenant_order_bound_reads' as TenantId;
  const r = await h.receiver();
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['user.*'], ordering: 'key' });
  const { stream } = deliveryAddress(endpoint.id, h.config.deliveryShards);
  // Counted from the second event on: the delivery instances have set up the keyed consumer, and the
  // router read its backlog once, for the first.
  await h.publish(tenant, 'user.updated', { userId: 'user_reads0', n: -1 });
  await r.waitFor(1, 30_000);
  await eventually(() => (second?.directory?.get(endpoint.id) ? true : undefined), 10_000, 'the second instance to see the endpoint');
  await new Promise((res) => setTimeout(res, 1000)); // its reconcile (which may read the consumer once) is done
  const reads = h.service.nc.subscribe(`$JS.API.CONSUMER.INFO.${stream}.${keyedConsumerName(endpoint.id)}`);
  t.teardown(() => reads.unsubscribe());
  // Four seconds of events: the router read the backlog once a second before.
  for (let n = 0; n < 20; n++) {
    await h.publish(tenant, 'user.updated', { userId: `user_reads${n % 3}`, n });
    await new Promise((res) => setTimeout(res, 200));
  }
  await r.waitFor(21, 30_000);
  t.true(reads.getReceived() <= 1, `${reads.getReceived()} reads of the keyed consumer's backlog`);
});
