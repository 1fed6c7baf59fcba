// Replay end to end over the admin subject: a receiver that failed until the delivery died, then recovers,
// gets the replayed delivery with the original webhook-id and a valid signature; a replay that fails again
// dies again; bulk replay pages through an endpoint's dead letters; a forged, swapped or untagged record is
// refused (issue 23).
import test from 'ava';
import { Webhook } from 'standardwebhooks';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import { AdminRequestError, type AdminClient } from '../src/admin/client.ts';
import type { DeadLetterOut } from '../src/admin/protocol.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { randomBytes } from 'node:crypto';
import { createDeadLetterKeyring, openDeadLetter, sealForDeadLetters } from '../src/crypto/sodium.ts';
import type { OriginalMessage } from '../src/deadletter/sealed-message.ts';
import { resealDeadLetters } from '../src/deadletter/reseal.ts';
import { deadLetterTaggerOf } from '../src/deadletter/tag.ts';
import { subjectHasherOf } from '../src/erasure/subject-hash.ts';
import { createLogger } from '../src/log.ts';
import { deliveryAddress } from '../streams/deliveries.ts';

let h: TestService;
let admin: AdminClient;

const receiver = (healthy: () => boolean) => h.receiver(() => (healthy() ? 200 : 500));

const deadLettersOf = (endpoint: string, count: number, status: 'dead' | 'replayed' = 'dead') =>
  eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint, status });
    return page.data.length >= count ? page.data : undefined;
  }, 30_000, `${count} ${status} dead letter(s) of ${endpoint}`);

const verify = (secret: string, r: Receiver['received'][number]) => new Webhook(secret).verify(r.body, {
  'webhook-id': String(r.headers['webhook-id']),
  'webhook-timestamp': String(r.headers['webhook-timestamp']),
  'webhook-signature': String(r.headers['webhook-signature']),
});

const logLines: string[] = [];
const sql = (q: string, params: unknown[] = []) => h.service.orm!.em.fork().execute(q, params);
const openOriginal = (sealed: Buffer) =>
  JSON.parse(new TextDecoder().decode(openDeadLetter(h.keys.deadLetterPublicKey, h.keys.deadLetterSecretKey, new Uint8Array(sealed)))) as OriginalMessage;
let forgedSeq = 900_000;

/** Insert a dead-letter row as someone with write access to the table would: any message, any tag. */
async function forge(id: string, message: OriginalMessage, row: { endpoint: string; tenant: string; webhookId: string }, tag: Uint8Array | null): Promise<void> {
  const sealed = sealForDeadLetters(h.keys.deadLetterPublicKey, new TextEncoder().encode(JSON.stringify(message)));
  await sql(`insert into dead_letters (id, endpoint_id, tenant, webhook_id, event_type, attempts, failed_at, sealed, tag, source_stream, source_seq, created_at)
    values (?, ?, ?, ?, ?, 3, now(), ?, ?, 'DELIVERIES_0', ?, now())`,
  [id, row.endpoint, row.tenant, row.webhookId, originalHeaderOf(message, 'hookstream-event') ?? 'user.updated', Buffer.from(sealed), tag ? Buffer.from(tag) : null, forgedSeq++]);
}
const originalHeaderOf = (m: OriginalMessage, name: string) => m.headers[name]?.[0];

test.before(async () => {
  h = await startTestService('admin_replay', { HOOKSTREAM_RETRY_SCHEDULE: '300ms,600ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '2s', HOOKSTREAM_LOG_LEVEL: 'info' }, {
    logWrite: (l) => logLines.push(l),
  });
  ({ admin } = await h.operator({ timeoutMs: 20_000 }));
});

test.after.always(() => h?.closeAll());

test('replay: a recovered receiver gets the original webhook-id, validly signed, and the record notes it', async (t) => {
  let healthy = false;
  const r = await receiver(() => healthy);
  const tenant = 'tenant_replay' as TenantId;
  const { endpoint, signingSecret } = await h.store.create(tenant, { url: r.url, events: ['user.*'] });
  await h.publish(tenant, 'user.deactivated', { userId: 'user_9' });
  const [letter] = await deadLettersOf(endpoint.id, 1);
  t.is(r.received.length, 3, 'first attempt and two retries, all failed');
  const originalId = String(r.received[0]!.headers['webhook-id']);
  t.is(letter!.webhook_id, originalId);
  t.is((await admin.showDelivery({ webhook_id: letter!.webhook_id, endpoint: endpoint.id })).state, 'dead');

  healthy = true;
  const replayedBefore = h.service.metrics.deadLettersReplayed.get();
  const out = await admin.replayDeadLetter({ id: letter!.id });
  t.like(out.dead_letter, { id: letter!.id, status: 'replayed', replay_count: 1, dead_count: 1 });
  t.truthy(out.dead_letter.last_replayed_at);
  t.is(out.replay.msg_id, `${letter!.webhook_id}.${endpoint.id}.replay.1`);
  t.false(out.replay.duplicate);
  t.true(h.service.metrics.deadLettersReplayed.get() > replayedBefore, 'counted');

  const got = (await r.waitFor(4))[3]!;
  t.is(got.headers['webhook-id'], originalId, 'same webhook-id as the original attempts');
  t.deepEqual(verify(signingSecret!, got), { type: 'user.deactivated', data: { userId: 'user_9' } });
  t.true(Math.abs(Number(got.headers['webhook-timestamp']) - got.at / 1000) < 2, 'signed at send time, so receivers accept it');

  const state = await eventually(async () => {
    const s = await admin.showDelivery({ webhook_id: letter!.webhook_id, endpoint: endpoint.id });
    return s.state === 'acknowledged' ? s : undefined;
  }, 10_000, 'acknowledged');
  t.like(state, { attempts: 1, dead_letter: { id: letter!.id, status: 'replayed', replay_count: 1 } });
  t.is(state.history.length, 3, 'the failures before the replay stay in the history');

  // A second replay must be asked for explicitly; then it goes out again under the same webhook-id.
  const refused = await admin.replayDeadLetter({ id: letter!.id }).catch((e: unknown) => e);
  t.true(refused instanceof AdminRequestError && refused.code === 'conflict');
  const again = await admin.replayDeadLetter({ id: letter!.id, force: true });
  t.is(again.dead_letter.replay_count, 2);
  t.is((await r.waitFor(5))[4]!.headers['webhook-id'], originalId);
});

test('a replay that fails again runs the schedule and becomes dead again', async (t) => {
  const r = await receiver(() => false);
  const tenant = 'tenant_redead' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['organization.*'] });
  await h.publish(tenant, 'organization.updated', { organizationId: 'org_5' });
  const [letter] = await deadLettersOf(endpoint.id, 1);
  await admin.replayDeadLetter({ id: letter!.id });
  await r.waitFor(6);
  const redead = await eventually(async () => {
    const [d] = (await admin.listDeadLetters({ endpoint: endpoint.id })).data;
    return d && d.status === 'dead' && d.dead_count === 2 ? d : undefined;
  }, 20_000, 'dead again');
  t.like(redead, { id: letter!.id, replay_count: 1, attempts: 3, last_status: 500 });
  const state = await admin.showDelivery({ webhook_id: letter!.webhook_id, endpoint: endpoint.id });
  t.is(state.state, 'dead');
  t.is(state.history.length, 6, 'three attempts per round, two rounds');
  t.is(new Set(r.received.map((g) => g.headers['webhook-id'])).size, 1);
  // It can be replayed again.
  t.is((await admin.replayDeadLetter({ id: letter!.id })).dead_letter.replay_count, 2);
});

test('replay many: all of an endpoint\'s dead letters, in pages, with a total for progress', async (t) => {
  let healthy = false;
  const r = await receiver(() => healthy);
  const tenant = 'tenant_bulk' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['*'] });
  const other = await h.store.create(tenant, { url: r.url, events: ['user.created'] });
  for (let i = 0; i < 4; i++) await h.publish(tenant, 'organizationInvitation.created', { invitationId: `inv_${i}` });
  await h.publish(tenant, 'user.created', { userId: 'user_bulk' });
  const letters: DeadLetterOut[] = await deadLettersOf(endpoint.id, 5);
  await deadLettersOf(other.endpoint.id, 1);
  healthy = true;
  const before = r.received.length;

  const replayed: string[] = [];
  let cursor: string | undefined;
  const totals = new Set<number>();
  do {
    const batch = await admin.replayDeadLetters({ endpoint: endpoint.id, limit: 2, ...(cursor ? { cursor } : {}) });
    t.deepEqual(batch.failed, []);
    replayed.push(...batch.replayed.map((x) => x.id));
    totals.add(batch.total);
    cursor = batch.next_cursor ?? undefined;
  } while (cursor);
  t.deepEqual(replayed, letters.map((l) => l.id).sort(), 'each once, oldest first');
  t.deepEqual([...totals], [5]);
  const got = await r.waitFor(before + 5);
  t.deepEqual(got.slice(before).map((g) => String(g.headers['webhook-id'])).sort(), letters.map((l) => l.webhook_id).sort());
  // The other endpoint's dead letter was not part of it.
  t.is((await admin.listDeadLetters({ endpoint: other.endpoint.id, status: 'dead' })).data.length, 1);
  // Nothing left to replay by that filter.
  const none = await admin.replayDeadLetters({ endpoint: endpoint.id });
  t.like(none, { total: 0, replayed: [], next_cursor: null });
});

test('replaying to a deleted endpoint is refused, and a bulk run reports it without stopping', async (t) => {
  const r = await receiver(() => false);
  const tenant = 'tenant_deleted' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['user.*'] });
  await h.publish(tenant, 'user.updated', { userId: 'user_d' });
  const [letter] = await deadLettersOf(endpoint.id, 1);
  await h.store.delete(tenant, endpoint.id);
  const e = await admin.replayDeadLetter({ id: letter!.id }).catch((x: unknown) => x);
  t.true(e instanceof AdminRequestError);
  t.is((e as AdminRequestError).code, 'conflict');
  t.regex((e as AdminRequestError).message, /is deleted; restore it/);
  const bulk = await admin.replayDeadLetters({ endpoint: endpoint.id });
  t.is(bulk.replayed.length, 0);
  t.is(bulk.failed[0]?.id, letter!.id);
  t.is(bulk.failed[0]?.error.code, 'conflict');
  t.is((await admin.showDeadLetter({ id: letter!.id })).dead_letter.status, 'dead', 'untouched');
});

test.serial('a dead letter stored before tags is refused until keys reseal-dead-letters tags it; a mismatched one is never tagged', async (t) => {
  const r = await receiver(() => false);
  const tenant = 'tenant_legacy' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['user.*'] });
  await h.publish(tenant, 'user.updated', { userId: 'user_legacy' });
  const [legacy] = await deadLettersOf(endpoint.id, 1);
  await sql('update dead_letters set tag = null where id = ?', [legacy!.id]);
  t.is((await admin.showDeadLetter({ id: legacy!.id })).tag, 'missing');
  const refused = await admin.replayDeadLetter({ id: legacy!.id }).catch((x: unknown) => x);
  t.regex(String(refused), /stored before dead letters carried an authentication tag/);
  // An untagged record whose message names another webhook-id than its row.
  const sealed = ((await sql('select sealed from dead_letters where id = ?', [legacy!.id]))[0] as { sealed: Buffer }).sealed;
  const other = openOriginal(sealed);
  const mismatched = 'dl_legacy0000000000000000001';
  await forge(mismatched, other, { endpoint: endpoint.id, tenant, webhookId: 'msg_legacy000001' }, null);

  const log = createLogger({ level: 'error', write: () => undefined });
  const result = await resealDeadLetters({
    orm: h.service.orm!, keyring: createDeadLetterKeyring(h.keys.deadLetterSecretKey),
    seal: (bytes) => sealForDeadLetters(h.keys.deadLetterPublicKey, bytes), tagger: deadLetterTaggerOf(h.keys.masterKey),
    hasher: subjectHasherOf(h.keys.masterKey), shards: h.config.deliveryShards, log,
  });
  t.true(result.resealed >= 1);
  t.deepEqual(result.failed.map((f) => f.id), [mismatched]);
  t.regex(result.failed[0]!.reason, /untagged and its webhook-id header is not the record's; not tagged/);
  t.is((await admin.showDeadLetter({ id: legacy!.id })).tag, 'current');
  t.is((await admin.showDeadLetter({ id: mismatched })).tag, 'missing');
  const again = await resealDeadLetters({
    orm: h.service.orm!, keyring: createDeadLetterKeyring(h.keys.deadLetterSecretKey),
    seal: (bytes) => sealForDeadLetters(h.keys.deadLetterPublicKey, bytes), tagger: deadLetterTaggerOf(h.keys.masterKey),
    hasher: subjectHasherOf(h.keys.masterKey), shards: h.config.deliveryShards, log,
  });
  t.is(again.resealed, 0, 'a second run changes nothing');
  t.like(await admin.replayDeadLetter({ id: legacy!.id }), { dead_letter: { status: 'replayed', replay_count: 1 } });
});

test.serial('a forged, swapped or moved dead-letter record is refused on replay, single and bulk; nothing is published', async (t) => {
  // Issue 23, from the attacker's side: write access to dead_letters (the sealing key is public by design),
  // but not the master key the tags are made under.
  const rA = await receiver(() => false);
  const rB = await receiver(() => true);
  const a = await h.store.create('tenant_victim_a' as TenantId, { url: rA.url, events: ['user.*'] });
  const b = await h.store.create('tenant_victim_b' as TenantId, { url: rB.url, events: ['user.*'] });
  await h.publish('tenant_victim_a', 'user.updated', { userId: 'user_a1' });
  await h.publish('tenant_victim_a', 'user.updated', { userId: 'user_a2' });
  const [one, two] = await deadLettersOf(a.endpoint.id, 2);
  const rowOf = async (id: string) => (await sql('select sealed, tag from dead_letters where id = ?', [id]))[0] as { sealed: Buffer; tag: Buffer };
  const honest1 = await rowOf(one!.id);
  const honest2 = await rowOf(two!.id);
  t.is(honest1.tag.length, 32, 'the dead-letter role tagged it');
  t.is((await admin.showDeadLetter({ id: one!.id })).tag, 'current');
  const original = openOriginal(honest1.sealed);
  const asB = (m: OriginalMessage, webhookId: string): OriginalMessage => ({
    ...m, subject: deliveryAddress(b.endpoint.id, h.config.deliveryShards).subject,
    headers: { ...m.headers, 'hookstream-endpoint': [b.endpoint.id], 'hookstream-tenant': ['tenant_victim_b'], 'hookstream-event': ['user.deleted'], 'webhook-id': [webhookId] },
  });

  // 1. A forged record naming B's endpoint consistently, with a made-up tag.
  const forged = 'dl_forged00000000000000000001';
  await forge(forged, asB(original, 'msg_forged000001'), { endpoint: b.endpoint.id, tenant: 'tenant_victim_b', webhookId: 'msg_forged000001' }, randomBytes(32));
  // 2. The same without a tag (as if stored before tags existed).
  const untagged = 'dl_forged00000000000000000002';
  await forge(untagged, asB(original, 'msg_forged000002'), { endpoint: b.endpoint.id, tenant: 'tenant_victim_b', webhookId: 'msg_forged000002' }, null);
  // 3. A record naming A's endpoint whose message is an API subject (emptying REJECTED), with A's real tag.
  const purge = 'dl_forged00000000000000000003';
  await forge(purge, { ...original, subject: '$JS.API.STREAM.PURGE.REJECTED' }, { endpoint: a.endpoint.id, tenant: 'tenant_victim_a', webhookId: one!.webhook_id.replace('msg_', 'msg_x') }, honest1.tag);
  // 4. A's two records with their sealed messages and tags swapped.
  await sql('update dead_letters set sealed = ?, tag = ? where id = ?', [honest2.sealed, honest2.tag, one!.id]);
  await sql('update dead_letters set sealed = ?, tag = ? where id = ?', [honest1.sealed, honest1.tag, two!.id]);
  // 5. Another dead letter of A moved, whole, to B's endpoint and tenant.
  await h.publish('tenant_victim_a', 'user.updated', { userId: 'user_a3' });
  const three = (await deadLettersOf(a.endpoint.id, 4)).find((d) => ![one!.id, two!.id, purge].includes(d.id))!;
  await sql('update dead_letters set endpoint_id = ?, tenant = ? where id = ?', [b.endpoint.id, 'tenant_victim_b', three.id]);

  await h.publishRaw('tenant_victim_a', 'user.exploded', 'kept in REJECTED');
  const jsm = h.service.jsm;
  const rejectedBefore = await eventually(async () => {
    const n = (await jsm.streams.info('REJECTED')).state.messages;
    return n > 0 ? n : undefined;
  }, 10_000, 'a rejected event');
  const published = async () => (await jsm.streams.info(deliveryAddress(b.endpoint.id, h.config.deliveryShards).stream)).state.last_seq
    + (await jsm.streams.info(deliveryAddress(a.endpoint.id, h.config.deliveryShards).stream)).state.last_seq;
  const publishedBefore = await published();
  const refusedBefore = logLines.filter((l) => l.includes('dead letter refused')).length;

  const refused = [forged, untagged, purge, one!.id, two!.id, three.id];
  for (const id of refused) {
    const e = await admin.replayDeadLetter({ id, force: true }).catch((x: unknown) => x);
    t.true(e instanceof AdminRequestError && e.code === 'conflict', id);
    t.regex((e as Error).message, /was not replayed: .*nothing was published/, id);
  }
  t.regex(String(await admin.replayDeadLetter({ id: untagged }).catch((x: unknown) => x)), /stored before dead letters carried an authentication tag/);
  for (const id of [forged, one!.id, two!.id, three.id]) {
    t.is((await admin.showDeadLetter({ id })).tag, 'invalid', id);
  }
  const bulkA = await admin.replayDeadLetters({ endpoint: a.endpoint.id });
  const bulkB = await admin.replayDeadLetters({ endpoint: b.endpoint.id });
  t.deepEqual([...bulkA.failed, ...bulkB.failed].map((f) => f.id).sort(), [...refused].sort());
  t.deepEqual([...bulkA.replayed, ...bulkB.replayed], []);
  t.is(await published(), publishedBefore, 'nothing published on either endpoint\'s delivery stream');
  await new Promise((r) => setTimeout(r, 1500));
  t.is(rB.received.length, 0, 'B got nothing');
  t.is(rA.received.length, 9, 'A got only its real attempts');
  t.is((await jsm.streams.info('REJECTED')).state.messages, rejectedBefore, 'REJECTED not purged');

  // Each refusal is logged, naming the record but never its message.
  const lines = logLines.filter((l) => l.includes('dead letter refused')).slice(refusedBefore);
  t.true(lines.length >= refused.length * 2, 'single and bulk refusals logged');
  for (const l of lines) {
    t.false(/user_a[0-9]|body_base64|user\.deleted/.test(l), 'no payload in the log');
    for (const k of [h.keys.masterKey, h.keys.deadLetterSecretKey]) t.false(l.includes(k), 'no key in the log');
  }

  // Swapped back, the honest records replay.
  await sql('update dead_letters set sealed = ?, tag = ? where id = ?', [honest1.sealed, honest1.tag, one!.id]);
  await sql('update dead_letters set sealed = ?, tag = ? where id = ?', [honest2.sealed, honest2.tag, two!.id]);
  const ok = await admin.replayDeadLetters({ endpoint: a.endpoint.id });
  t.deepEqual(ok.replayed.map((x) => x.id).sort(), [one!.id, two!.id].sort());
});
