// Replay end to end over the admin subject: a receiver that failed until the delivery died, then recovers,
// gets the replayed delivery with the original webhook-id and a valid signature; a replay that fails again
// dies again; bulk replay pages through an endpoint's dead letters.
import test from 'ava';
import { Webhook } from 'standardwebhooks';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import { AdminRequestError, type AdminClient } from '../src/admin/client.ts';
import type { DeadLetterOut } from '../src/admin/protocol.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { openDeadLetter, sealForDeadLetters } from '../src/crypto/sodium.ts';
import type { OriginalMessage } from '../src/deadletter/sealed-message.ts';
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

test.before(async () => {
  h = await startTestService('admin_replay', { HOOKSTREAM_RETRY_SCHEDULE: '300ms,600ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '2s' });
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

test('a forged or swapped dead-letter record is refused on replay, single and bulk, and nothing is published', async (t) => {
  // Issue 23, from the attacker's side: write access to dead_letters (the sealing key is public by design).
  const rA = await receiver(() => false);
  const rB = await receiver(() => true);
  const a = await h.store.create('tenant_victim_a' as TenantId, { url: rA.url, events: ['user.*'] });
  const b = await h.store.create('tenant_victim_b' as TenantId, { url: rB.url, events: ['user.*'] });
  await h.publish('tenant_victim_a', 'user.updated', { userId: 'user_a' });
  const [letter] = await deadLettersOf(a.endpoint.id, 1);
  const sql = (q: string, params: unknown[] = []) => h.service.orm!.em.fork().execute(q, params);
  const [{ sealed }] = await sql('select sealed from dead_letters where id = ?', [letter!.id]) as [{ sealed: Buffer }];
  const original = JSON.parse(new TextDecoder().decode(openDeadLetter(h.keys.deadLetterPublicKey, h.keys.deadLetterSecretKey, new Uint8Array(sealed)))) as OriginalMessage;
  const forge = async (id: string, message: OriginalMessage, row: { endpoint: string; tenant: string }) => {
    await sql(`insert into dead_letters (id, endpoint_id, tenant, webhook_id, event_type, attempts, failed_at, sealed, source_stream, source_seq, created_at)
      values (?, ?, ?, ?, 'user.deleted', 3, now(), ?, 'DELIVERIES_0', ?, now())`,
    [id, row.endpoint, row.tenant, `msg_forged${id.slice(-6)}`, Buffer.from(sealForDeadLetters(h.keys.deadLetterPublicKey, new TextEncoder().encode(JSON.stringify(message)))), 900_000 + Number(id.slice(-1))]);
  };
  const asB = (m: OriginalMessage): OriginalMessage => {
    const headers = { ...m.headers, 'hookstream-endpoint': [b.endpoint.id], 'hookstream-tenant': ['tenant_victim_b'], 'hookstream-event': ['user.deleted'] };
    return { ...m, subject: deliveryAddress(b.endpoint.id, h.config.deliveryShards).subject, headers };
  };
  // 1. A record under A's endpoint whose sealed message is a delivery to B's.
  const forged = 'dl_forged00000000000000000001';
  await forge(forged, { ...asB(original), headers: { ...asB(original).headers, 'webhook-id': ['msg_forged000001'] } }, { endpoint: a.endpoint.id, tenant: 'tenant_victim_a' });
  // 2. A record naming A's endpoint whose message is an API subject: emptying REJECTED.
  const purge = 'dl_forged00000000000000000002';
  await forge(purge, { ...original, subject: '$JS.API.STREAM.PURGE.REJECTED', headers: { ...original.headers, 'webhook-id': ['msg_forged000002'], 'hookstream-event': ['user.deleted'] } },
    { endpoint: a.endpoint.id, tenant: 'tenant_victim_a' });
  // 3. A's real record moved to B's endpoint and tenant (swapped row).
  await sql('update dead_letters set endpoint_id = ?, tenant = ? where id = ?', [b.endpoint.id, 'tenant_victim_b', letter!.id]);
  await h.publishRaw('tenant_victim_a', 'user.exploded', 'kept in REJECTED');
  const jsm = h.service.jsm;
  const rejectedBefore = await eventually(async () => {
    const n = (await jsm.streams.info('REJECTED')).state.messages;
    return n > 0 ? n : undefined;
  }, 10_000, 'a rejected event');

  for (const id of [forged, purge, letter!.id]) {
    const e = await admin.replayDeadLetter({ id, force: true }).catch((x: unknown) => x);
    t.true(e instanceof AdminRequestError && e.code === 'conflict', id);
    t.regex((e as Error).message, /was not replayed: .* \(a forged or altered record\); nothing was published/);
  }
  const bulkA = await admin.replayDeadLetters({ endpoint: a.endpoint.id });
  const bulkB = await admin.replayDeadLetters({ endpoint: b.endpoint.id });
  t.deepEqual([...bulkA.failed, ...bulkB.failed].map((f) => f.id).sort(), [forged, purge, letter!.id].sort());
  t.deepEqual([...bulkA.replayed, ...bulkB.replayed], []);
  await new Promise((r) => setTimeout(r, 1500));
  t.is(rB.received.length, 0, 'B got nothing');
  t.is(rA.received.length, 3, 'A got only its three real attempts');
  t.is((await jsm.streams.info('REJECTED')).state.messages, rejectedBefore, 'REJECTED not purged');
});
