// Direct delivery (HOOKSTREAM_DIRECT_DELIVERY, streams/direct.ts): endpoints without ordering read their
// tenant's partition stream through a consumer of their own; ordered endpoints keep the router's queue.
// On the real nats-server, Postgres and loopback receivers: the switch loses and doubles nothing, an event
// has one webhook-id on both paths, retries end in a dead letter that is shown and replayed, erasure
// reaches the attempts, and an endpoint's consumer follows its life (created, disabled, restored, deleted).
import test from 'ava';
import { nanos } from '@nats-io/nats-core';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';
import { tenantPartition } from '../src/domain/partition.ts';
import { createWebhookIdCodec, deriveWebhookIdKey } from '../src/domain/webhook-id.ts';
import { DisabledReason, Ordering } from '../src/domain/endpoint.ts';
import { deliveryAddress } from '../streams/deliveries.ts';
import { ATTEMPTS_STREAM } from '../streams/attempts.ts';
import { EVENTS_STREAM, partitionStream } from '../streams/events.ts';
import { directFilters, filterPatterns, filtersCover } from '../streams/direct.ts';
import type { EventPattern } from '../src/domain/catalogue.ts';
import { openDeadLetter } from '../src/crypto/sodium.ts';
import { parseOriginalMessage } from '../src/deadletter/sealed-message.ts';
import { createDataKeys, DataKeyErasedError, isDataKeyErased, isSealedBody } from '../src/erasure/data-keys.ts';

const PARTITIONS = 4;
// It starts with direct delivery off and turns it on itself.
const ENV = { HOOKSTREAM_RETRY_SCHEDULE: '200ms,400ms', HOOKSTREAM_EVENT_PARTITIONS: String(PARTITIONS), HOOKSTREAM_DIRECT_DELIVERY: '0' };
const TENANT = 'tenant_direct' as TenantId;
/** Another tenant in TENANT's partition. */
const NEIGHBOUR = Array.from({ length: 1000 }, (_, i) => `tenant_near_${i}`)
  .find((x) => tenantPartition(x, PARTITIONS) === tenantPartition(TENANT, PARTITIONS))! as TenantId;
const STREAM = partitionStream(tenantPartition(TENANT, PARTITIONS));

let h: TestService;
let admin: AdminClient;
/** Subscribed before the switch, so its first event goes through the router. */
let early: { r: Receiver; id: EndpointId };
let beforeSwitch: number;

const typeOf = (x: { body: string }) => (JSON.parse(x.body) as { type: string }).type;
const webhookIdOf = async (seq: number) => createWebhookIdCodec(deriveWebhookIdKey(Buffer.from(h.keys.masterKey, 'base64')))
  .encode({ seq, ms: Date.parse((await h.service.jsm.streams.info(EVENTS_STREAM)).created) });
const directConsumer = (id: string) => h.service.jsm.consumers.info(STREAM, id).catch(() => null);
/** Messages a consumer has handed out, all time (0 when it does not exist). */
const handedOut = async (stream: string, consumer: string) => (await h.service.jsm.consumers.info(stream, consumer).catch(() => null))?.delivered.consumer_seq ?? 0;
const queueOf = (id: string) => deliveryAddress(id, h.config.deliveryShards).stream;

test.before(async () => {
  h = await startTestService('direct_delivery', ENV);
  ({ admin } = await h.operator({ timeoutMs: 60_000 }));
  const r = await h.receiver();
  early = { r, id: (await h.store.create(TENANT, { url: r.url, events: ['user.*'] })).endpoint.id };
  beforeSwitch = (await h.publish(TENANT, 'user.created', { userId: 'user_before' })).seq;
  await r.waitFor(1);
  // Past the consumers' start slack (1 s): the event before the switch is the router's alone.
  await new Promise((resolve) => setTimeout(resolve, 1500));
  await h.restart({ ...ENV, HOOKSTREAM_DIRECT_DELIVERY: '1' });
});

test.after.always(() => h?.closeAll());

test.serial('across the switch: the event before it came through the router, the next through the endpoint\'s own consumer; none twice', async (t) => {
  const after = await h.publish(TENANT, 'user.updated', { userId: 'user_after' });
  await early.r.waitFor(2);
  await new Promise((resolve) => setTimeout(resolve, 500));
  t.deepEqual(early.r.received.map(typeOf), ['user.created', 'user.updated']);
  t.is(early.r.received[0]!.headers['webhook-id'], await webhookIdOf(beforeSwitch));
  t.is(early.r.received[1]!.headers['webhook-id'], await webhookIdOf(after.seq));
  t.is(await handedOut(queueOf(early.id), early.id), 1, 'its queue handed out the first event only');
  const ci = await directConsumer(early.id);
  t.deepEqual(ci?.config.filter_subjects, [`events.${TENANT}.${tenantPartition(TENANT, PARTITIONS)}.user.>`], 'the types it takes, of its tenant');
  t.is(ci?.delivered.consumer_seq, 1, 'its own consumer the second');
  t.is(ci?.num_ack_pending, 0, 'acked');
});

test.serial('an unordered and an ordered endpoint get the same event with the same webhook-id; types and tenants not taken are not sent', async (t) => {
  // Past the start slack: the last test's event is not one of theirs.
  await new Promise((resolve) => setTimeout(resolve, 1200));
  const plain = await h.receiver();
  const ordered = await h.receiver();
  const other = await h.receiver();
  const plainId = (await h.store.create(TENANT, { url: plain.url, events: ['organization.*'] })).endpoint.id;
  const orderedId = (await h.store.create(TENANT, { url: ordered.url, events: ['organization.*'], ordering: Ordering.Key })).endpoint.id;
  await h.store.create(NEIGHBOUR, { url: other.url, events: ['user.*'] });
  await h.publish(TENANT, 'user.deleted', { userId: 'user_x' });
  await h.publish(NEIGHBOUR, 'organization.created', { organizationId: 'org_n' });
  const ack = await h.publish(TENANT, 'organization.created', { organizationId: 'org_1' });
  const [p] = await plain.waitFor(1);
  const [o] = await ordered.waitFor(1);
  t.is(p!.headers['webhook-id'], await webhookIdOf(ack.seq));
  t.is(o!.headers['webhook-id'], p!.headers['webhook-id']);
  t.is(p!.body, o!.body, 'the same body, made by the router and by the delivery role');
  await new Promise((resolve) => setTimeout(resolve, 500));
  t.deepEqual(plain.received.map(typeOf), ['organization.created']);
  t.is(other.received.length, 0, 'the neighbour took only user events, and published none');
  t.is(await handedOut(queueOf(plainId), plainId), 0, 'nothing queued for the unordered endpoint');
  t.is(await handedOut(STREAM, plainId), 1, 'its consumer is handed only the type it takes');
  t.deepEqual((await directConsumer(plainId))?.config.filter_subjects, [`events.${TENANT}.${tenantPartition(TENANT, PARTITIONS)}.organization.>`]);
  t.is(await handedOut(queueOf(orderedId), orderedId) + await handedOut(queueOf(orderedId), `${orderedId}-key`), 1, 'the ordered one\'s came through the router');
  t.is(await directConsumer(orderedId), null, 'no direct consumer for an ordered endpoint');

  // Its types changed: its consumer's filter follows.
  await h.store.update(TENANT, plainId, { events: ['organization.*', 'user.deleted'] });
  await eventually(async () => ((await directConsumer(plainId))?.config.filter_subjects?.length === 2 ? true : undefined), 10_000, 'the new filter');
  await h.publish(TENANT, 'user.deleted', { userId: 'user_y' });
  await plain.waitFor(2);
  t.deepEqual(plain.received.map(typeOf), ['organization.created', 'user.deleted']);
});

test.serial('a PATCH adding a type: its first event arrives at once, though events of the old type had the consumer read on past it; a type taken away is not sent', async (t) => {
  const r = await h.receiver();
  const id = (await h.store.create(TENANT, { url: r.url, events: ['user.created'] })).endpoint.id;
  await eventually(async () => (await directConsumer(id)) ?? undefined, 10_000, 'its consumer');
  const added = ['user.updated', 'user.deleted', 'organization.created', 'organization.updated', 'organization.deleted'] as const;
  const taken: EventPattern[] = ['user.created'];
  for (const [i, type] of added.entries()) {
    taken.push(type);
    await h.store.update(TENANT, id, { events: [...taken] });
    // Published as soon as the PATCH is stored, then one of a type it took before: a consumer still
    // filtered by the old types reads on to that one, past the new type's event, and never goes back.
    await h.publish(TENANT, type, type.startsWith('user.') ? { userId: `user_new_${i}` } : { organizationId: `org_new_${i}` });
    await h.publish(TENANT, 'user.created', { userId: `user_old_${i}` });
  }
  // Not a timing assertion: a type skipped by its consumer never comes at all, and one a waiting pull
  // does not see comes 30 s late (the receiver's wait is the test's bound, not a target).
  await r.waitFor(2 * added.length, 20_000);
  t.deepEqual(added.filter((type) => !r.received.some((x) => typeOf(x) === type)), [], 'every added type\'s first event arrived');

  await h.store.update(TENANT, id, { events: ['user.created'] });
  await h.publish(TENANT, 'organization.created', { organizationId: 'org_taken_away' });
  await h.publish(TENANT, 'user.created', { userId: 'user_last' });
  await r.waitFor(2 * added.length + 1);
  await new Promise((resolve) => setTimeout(resolve, 500));
  t.is(r.received.length, 2 * added.length + 1, 'the type taken away is not sent');
  t.false(r.received.some((x) => x.body.includes('org_taken_away')));
});

test('a consumer\'s filter read back as patterns, and what covers what', (t) => {
  const p = tenantPartition('t1', PARTITIONS);
  const events: EventPattern[] = ['organization.*', 'organizationMembership.created', 'user.deleted'];
  t.deepEqual(filterPatterns(directFilters('t1', PARTITIONS, events)), events);
  t.deepEqual(filterPatterns(directFilters('t1', PARTITIONS, ['*'])), ['*']);
  t.true(filtersCover(directFilters('t1', PARTITIONS, ['user.*']), directFilters('t1', PARTITIONS, ['user.created', 'user.deleted'])));
  t.true(filtersCover([`events.t1.${p}.>`], directFilters('t1', PARTITIONS, events)));
  t.false(filtersCover(directFilters('t1', PARTITIONS, ['organization.*']), directFilters('t1', PARTITIONS, ['organizationMembership.created'])), 'organization.> does not take organizationMembership');
  t.false(filtersCover(directFilters('t1', PARTITIONS, ['user.created']), directFilters('t1', PARTITIONS, ['user.*'])));
});

test('an endpoint\'s filter: one subject per pattern, none covering another', (t) => {
  const p = tenantPartition('t1', PARTITIONS);
  t.deepEqual(directFilters('t1', PARTITIONS, ['user.created', 'user.*', 'organizationMembership.created', 'organization.*']),
    [`events.t1.${p}.organization.>`, `events.t1.${p}.organizationMembership.created`, `events.t1.${p}.user.>`]);
  t.deepEqual(directFilters('t1', PARTITIONS, ['user.created', '*']), [`events.t1.${p}.>`]);
  t.deepEqual(directFilters('t1', PARTITIONS, ['organization.auth_policy.updated', 'user.created']),
    [`events.t1.${p}.organization.auth_policy.updated`, `events.t1.${p}.user.created`]);
});

test.serial('failures retry on the consumer\'s backoff, then a dead letter that is shown and replayed with the same webhook-id', async (t) => {
  let healthy = false;
  const r = await h.receiver(() => (healthy ? 200 : 503));
  const id = (await h.store.create(TENANT, { url: r.url, events: ['organizationMembership.*'] })).endpoint.id;
  const ack = await h.publish(TENANT, 'organizationMembership.created', { userId: 'user_m', organizationId: 'org_m' });
  await r.waitFor(3);
  const letter = await eventually(async () => (await admin.listDeadLetters({ endpoint: id, status: 'dead' })).data[0], 30_000, 'dead letter');
  const webhookId = await webhookIdOf(ack.seq);
  t.is(letter.webhook_id, webhookId);
  t.deepEqual(new Set(r.received.map((x) => x.headers['webhook-id'])), new Set([webhookId]), 'one id for every attempt');
  const shown = await admin.showDeadLetter({ id: letter.id });
  t.deepEqual(shown.message.body, JSON.parse(r.received[0]!.body), 'the dead letter holds the body sent');
  t.is(shown.tag, 'current');
  t.truthy(await h.service.jsm.streams.getMessage(STREAM, { seq: (await directConsumer(id))!.delivered.stream_seq }), 'the copy stays for the tenant\'s other endpoints');

  healthy = true;
  await admin.replayDeadLetter({ id: letter.id });
  const replayed = (await r.waitFor(4))[3]!;
  t.is(replayed.headers['webhook-id'], webhookId);
  t.is(replayed.body, r.received[0]!.body);
});

test.serial('erasing a user reaches the event, its copy, the attempts of the endpoint that read it directly and its dead letter', async (t) => {
  const r = await h.receiver(() => 500);
  const id = (await h.store.create(TENANT, { url: r.url, events: ['organizationInvitation.created'] })).endpoint.id;
  const ack = await h.publish(TENANT, 'organizationInvitation.created', { userId: 'user_erased', organizationId: 'org_e' });
  await r.waitFor(3);
  const letter = await eventually(async () => (await admin.listDeadLetters({ endpoint: id, status: 'dead' })).data[0], 30_000, 'dead letter');
  const attempts = `attempts.${id}.${await webhookIdOf(ack.seq)}`;
  t.true(((await h.service.jsm.streams.info(ATTEMPTS_STREAM, { subjects_filter: attempts })).state.subjects?.[attempts] ?? 0) > 0);
  // The dead letter's body, as a backup of Postgres keeps it: sealed under the event's data key, as a
  // queued delivery's, so destroying the user's key shreds it too. Opened here once, so this process holds the key.
  const [{ sealed }] = await h.service.orm!.em.fork().execute<{ sealed: Buffer }[]>('select sealed from dead_letters where id = ?', [letter.id]) as [{ sealed: Buffer }];
  const body = Buffer.from(parseOriginalMessage(openDeadLetter(h.keys.deadLetterPublicKey, h.keys.deadLetterSecretKey, new Uint8Array(sealed))).body_base64, 'base64');
  t.true(isSealedBody(body), 'the dead letter\'s body is sealed under its data key');
  const held = createDataKeys({ nc: h.service.nc, jsm: h.service.jsm, masterKey: h.keys.masterKey });
  t.teardown(() => held.close());
  t.is(Buffer.from(await held.open(body)).toString('utf8'), r.received[0]!.body, 'and opens to the body sent');
  t.deepEqual((await admin.showDeadLetter({ id: letter.id })).message.body, JSON.parse(r.received[0]!.body), 'shown opened');

  const out = await admin.eraseSubject({ tenant: TENANT, user: 'user_erased' });
  t.is(out.stores.events.erased + out.stores.unrouted_events.erased, 1);
  t.is(out.stores.partition_copies.erased, 1);
  t.true(out.stores.attempts.erased >= 2, `${out.stores.attempts.erased} attempt records`);
  t.is(out.stores.dead_letters.erased, 1);
  t.is((await h.service.jsm.streams.info(ATTEMPTS_STREAM, { subjects_filter: attempts })).state.subjects?.[attempts] ?? 0, 0);
  t.deepEqual((await admin.listDeadLetters({ endpoint: id })).data, []);
  // The copy a backup kept opens no more: in the process that held its key, nor in a fresh one.
  await eventually(async () => (await Promise.resolve().then(() => held.open(body)).then(() => false, isDataKeyErased) ? true : undefined), 5_000, 'the key forgotten');
  const fresh = createDataKeys({ nc: h.service.nc, jsm: h.service.jsm, masterKey: h.keys.masterKey });
  t.teardown(() => fresh.close());
  await t.throwsAsync(async () => fresh.open(body), { instanceOf: DataKeyErasedError });
});

test.serial('an endpoint\'s consumer follows its life: from its creation on, held while disabled, gone with it', async (t) => {
  const old = await h.publish(TENANT, 'user.created', { userId: 'user_old' });
  await new Promise((resolve) => setTimeout(resolve, 1500));
  const r = await h.receiver();
  const id = (await h.store.create(TENANT, { url: r.url, events: ['user.created'] })).endpoint.id;
  await eventually(async () => (await directConsumer(id)) ?? undefined, 10_000, 'its consumer');
  await h.publish(TENANT, 'user.created', { userId: 'user_new' });
  await r.waitFor(1);
  t.false(r.received.some((x) => x.body.includes('user_old')), `the event stored before it (seq ${old.seq}) is not sent`);

  await h.store.disable(id, DisabledReason.Operator);
  await new Promise((resolve) => setTimeout(resolve, 300));
  await h.publish(TENANT, 'user.created', { userId: 'user_held' });
  await new Promise((resolve) => setTimeout(resolve, 700));
  t.is(r.received.length, 1, 'held while disabled');
  await h.store.restore(TENANT, id);
  await r.waitFor(2);
  t.true(r.received[1]!.body.includes('user_held'));

  // A restart of the service in between: the consumer and its place outlive it.
  await h.restart({ ...ENV, HOOKSTREAM_DIRECT_DELIVERY: '1' });
  await h.publish(TENANT, 'user.created', { userId: 'user_after_restart' });
  await r.waitFor(3);
  t.is(r.received.length, 3);

  await h.store.delete(TENANT, id);
  await eventually(async () => ((await directConsumer(id)) === null ? true : undefined), 10_000, 'its consumer deleted');
});

test.serial('a producer\'s retried publish (same Nats-Msg-Id, past EVENTS\' 100 ms window) is sent once to each endpoint; another tenant\'s same id is its own event', async (t) => {
  await new Promise((resolve) => setTimeout(resolve, 1200));
  const [r1, r2, near] = [await h.receiver(), await h.receiver(), await h.receiver()];
  for (const r of [r1, r2]) await h.store.create(TENANT, { url: r.url, events: ['organizationInvitation.created', 'organizationInvitation.revoked'] });
  await h.store.create(NEIGHBOUR, { url: near.url, events: ['organizationInvitation.created', 'organizationInvitation.revoked'] });
  await new Promise((resolve) => setTimeout(resolve, 1200));
  const invite = { organizationId: 'org_i', invitationId: 'inv_1' };
  const first = await h.publish(TENANT, 'organizationInvitation.created', invite, { msgID: 'invite-1' });
  await new Promise((resolve) => setTimeout(resolve, 300));
  const again = await h.publish(TENANT, 'organizationInvitation.created', invite, { msgID: 'invite-1' });
  t.true(again.seq > first.seq && !again.duplicate, 'EVENTS stored it twice');
  // Past EVENTS' window again, which every tenant shares.
  await new Promise((resolve) => setTimeout(resolve, 300));
  const theirs = await h.publish(NEIGHBOUR, 'organizationInvitation.created', invite, { msgID: 'invite-1' });
  const next = await h.publish(TENANT, 'organizationInvitation.revoked', invite, { msgID: 'invite-1-revoked' });
  for (const r of [r1, r2]) await r.waitFor(2);
  await near.waitFor(1);
  await new Promise((resolve) => setTimeout(resolve, 1000));
  for (const r of [r1, r2]) {
    t.deepEqual(r.received.map((x) => x.headers['webhook-id']), [await webhookIdOf(first.seq), await webhookIdOf(next.seq)], 'the first publish, once, then the next event');
  }
  t.deepEqual(near.received.map((x) => x.headers['webhook-id']), [await webhookIdOf(theirs.seq)]);
});

test.serial('an event whose delivery body would not fit is refused once, by the router, though no endpoint takes it there; its direct endpoint gets nothing', async (t) => {
  await new Promise((resolve) => setTimeout(resolve, 1200));
  const r = await h.receiver();
  await h.store.create(TENANT, { url: r.url, events: ['user.unbanned'] });
  await new Promise((resolve) => setTimeout(resolve, 1200));
  // 5 bytes a number in, 22 out: under EVENTS' 256 KiB, over a delivery's 508 KiB once re-encoded.
  const huge = await h.publishRaw(TENANT, 'user.unbanned', `{"userId":"user_big","n":[${Array(40_000).fill('1e20').join(',')}]}`);
  const next = await h.publish(TENANT, 'user.unbanned', { userId: 'user_small' });
  await r.waitFor(1);
  await new Promise((resolve) => setTimeout(resolve, 500));
  t.deepEqual(r.received.map((x) => x.headers['webhook-id']), [await webhookIdOf(next.seq)]);
  const rejected = await eventually(async () => (await admin.listRejectedEvents({ tenant: TENANT, limit: 50 })).data.find((x) => x.events_seq === huge.seq), 10_000, 'the refusal written down');
  t.is(rejected.reason, 'too_large');
});

test.serial('made ordered: what was stored before the switch comes through its direct consumer, what came after through the router\'s queue, in order; each once, none lost at the switch', async (t) => {
  await new Promise((resolve) => setTimeout(resolve, 1200));
  const r = await h.receiver();
  const id = (await h.store.create(TENANT, { url: r.url, events: ['organizationMembership.updated'] })).endpoint.id;
  await eventually(async () => (await directConsumer(id)) ?? undefined, 10_000, 'its consumer');
  const userOf = (x: { body: string }) => (JSON.parse(x.body) as { data: { userId: string } }).data.userId;
  const publish = (i: number) => h.publish(TENANT, 'organizationMembership.updated', { userId: `user_s${i}`, organizationId: 'org_switch' });
  await publish(0);
  await r.waitFor(1);
  // Publishes going on while the switch is stored: each is sent whichever side takes it.
  const racing = Promise.all(Array.from({ length: 30 }, (_, i) => publish(1 + i)));
  await h.store.update(TENANT, id, { ordering: Ordering.Key });
  await racing;
  // The delivery role knows it is ordered (it made the keyed consumer); past the switch's slack.
  await eventually(async () => h.service.jsm.consumers.info(queueOf(id), `${id}-key`).catch(() => undefined), 10_000, 'its keyed consumer');
  await new Promise((resolve) => setTimeout(resolve, 1200));
  const after: string[] = [];
  for (let i = 31; i < 36; i++) after.push(await webhookIdOf((await publish(i)).seq));
  await eventually(async () => (new Set(r.received.map(userOf)).size === 36 ? true : undefined), 30_000, 'every event');
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const got = r.received.map((x) => String(x.headers['webhook-id']));
  t.deepEqual(got.filter((w) => after.includes(w)), after, 'those stored after the switch: once each, in order');
  t.true(await handedOut(queueOf(id), `${id}-key`) >= after.length, 'through the router\'s queue');
  // The router may queue an event stored before the switch that it settles after learning of it.
  t.true(got.length - 36 <= 31, `only events published before the switch may go out twice (${got.length - 36} did)`);
});

test.serial('a held event lives as long as a queued delivery (HOOKSTREAM_QUEUE_RETENTION): it expires unsent, and a restore sends only what came after', async (t) => {
  // Longer than the retry schedule's attempts (200 ms, 400 ms, three of 1 s), as start-up asks.
  await h.restart({ ...ENV, HOOKSTREAM_DIRECT_DELIVERY: '1', HOOKSTREAM_QUEUE_RETENTION: '4s', HOOKSTREAM_ATTEMPT_TIMEOUT: '1s' });
  t.is((await h.service.jsm.streams.info(STREAM)).config.max_age, nanos(4000), 'the partition stream keeps a copy as long as a work queue a delivery');
  await new Promise((resolve) => setTimeout(resolve, 1200));
  const r = await h.receiver();
  const id = (await h.store.create(TENANT, { url: r.url, events: ['user.banned'] })).endpoint.id;
  await eventually(async () => (await directConsumer(id)) ?? undefined, 10_000, 'its consumer');
  await h.store.disable(id, DisabledReason.Operator);
  await new Promise((resolve) => setTimeout(resolve, 300));
  await h.publish(TENANT, 'user.banned', { userId: 'user_expired' });
  await eventually(async () => ((await h.service.jsm.streams.info(STREAM)).state.messages === 0 ? true : undefined), 15_000, 'the held copy expired');
  await h.store.restore(TENANT, id);
  await h.publish(TENANT, 'user.banned', { userId: 'user_fresh' });
  await r.waitFor(1);
  await new Promise((resolve) => setTimeout(resolve, 500));
  t.deepEqual(r.received.map((x) => (JSON.parse(x.body) as { data: { userId: string } }).data.userId), ['user_fresh']);
});

test.serial('turning it off is no longer refused: the switch-off is written ahead; turning it on again before its window is drained is refused with when', async (t) => {
  const before = Date.now();
  await h.restart(ENV);
  const until = Number((await h.service.jsm.streams.info(EVENTS_STREAM)).config.metadata?.['hookstream_direct_until']);
  t.true(until >= before + 30_000 && until <= Date.now() + 40_000, `written about 30 s ahead (${until - before} ms)`);
  const e = await t.throwsAsync(h.restart({ ...ENV, HOOKSTREAM_DIRECT_DELIVERY: '1' }));
  t.regex(e?.message ?? '', /HOOKSTREAM_DIRECT_DELIVERY: is 1 but direct delivery was turned off at .*: it can be turned on again once .* has passed and every endpoint's direct consumer has drained and been deleted \(\d+ left; .*\); until then set it to 0/);
  await h.restart(ENV);
  t.is(Number((await h.service.jsm.streams.info(EVENTS_STREAM)).config.metadata?.['hookstream_direct_until']), until, 'written once');
});
