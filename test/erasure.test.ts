// Erasure by subject (issue 22) with the real NATS, Postgres and loopback receivers: a user's events in
// every store (routed and kept in EVENTS, queued for a disabled endpoint, dead-lettered, rejected, not yet
// routed) are erased and no operator surface shows them afterwards; another user's and another tenant's
// are untouched; a second run erases nothing; an erasure during a burst loses no other event; an ordering
// key (issue 21) through the CLI.
import test from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { createAdminClient, type AdminClient } from '../src/admin/client.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';
import type { Receiver } from './helpers/receiver.ts';
import { runCli } from './helpers/cli.ts';
import { createApiKey } from '../src/apikeys/store.ts';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { messagesOf } from '../src/erasure/by-subject.ts';
import { createDataKeys, DataKeyErasedError } from '../src/erasure/data-keys.ts';
import { DATA_KEYS_STREAM } from '../streams/data-keys.ts';
import { deliveryAddress } from '../streams/deliveries.ts';

let h: TestService;
let admin: AdminClient;

const USER = 'user_erased';
const OTHER = 'user_kept';

/** The service's and the CLI's (TEST_DIRECT_DELIVERY=1 sets both otherwise). */
const PINNED = { HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_EVENT_PARTITIONS: '0' };

test.before(async () => {
  // Pinned to the default path: it holds events back by stopping the router and counts the queued deliveries
  // erased (direct delivery's erasure: direct-delivery.test.ts).
  h = await startTestService('erasure', { ...PINNED, HOOKSTREAM_RETRY_SCHEDULE: '100ms,100ms' });
  const { nc } = await h.operator({ timeoutMs: 60_000 });
  admin = createAdminClient(nc, { timeoutMs: 60_000, operator: 'dpo@example.com' });
});
test.after.always(() => h?.closeAll());

async function endpoint(tenant: string, r: Receiver): Promise<EndpointId> {
  const { endpoint: e } = await h.store.create(tenant as TenantId, { url: r.url, events: ['*'] });
  return e.id;
}

/** Every stored message of the streams that hold payloads, as text with its stream and subject. */
type Stored = { stream: string; subject: string; text: string };

async function everyPayload(): Promise<Stored[]> {
  const out: Stored[] = [];
  for await (const name of h.service.jsm.streams.names()) {
    if (!/^(EVENTS|REJECTED|DELIVERIES_\d+|ATTEMPTS|ERASURE_INDEX)$/.test(name)) continue;
    const info = await h.service.jsm.streams.info(name);
    for (let seq = info.state.first_seq; seq <= info.state.last_seq && info.state.messages > 0; seq++) {
      const m = await h.service.jsm.streams.getMessage(name, { seq }).catch(() => null);
      if (m) out.push({ stream: name, subject: m.subject, text: Buffer.from(m.data).toString('utf8') });
    }
  }
  return out;
}

/** The nats-server store files whose bytes hold `text`. */
function storeFilesHolding(text: string | Uint8Array): string[] {
  const needle = Buffer.from(text);
  return readdirSync(h.nats.storeDir, { recursive: true, encoding: 'utf8' }).map((f) => join(h.nats.storeDir, f))
    .filter((f) => statSync(f, { throwIfNoEntry: false })?.isFile() && readFileSync(f).includes(needle));
}

const carrying = (all: Stored[], tenant: string, id: string) =>
  all.filter((m) => m.text.includes(`"${id}"`) && (m.subject.includes(`.${tenant}.`) || m.subject.endsWith(`.${tenant}`) || m.text.includes(tenant)));

test.serial("a user's payloads in every store are erased; another user's and another tenant's are not", async (t) => {
  const tenant = 'tenant_erase';
  const elsewhere = 'tenant_erase_other';
  const ok = await h.receiver(() => 204);
  const failing = await h.receiver(() => 500);
  const held = await h.receiver(() => 204);
  const otherTenant = await h.receiver(() => 204);
  await endpoint(tenant, ok);
  const failingId = await endpoint(tenant, failing);
  const heldId = await endpoint(tenant, held);
  await endpoint(elsewhere, otherTenant);
  // Queued and never attempted: the endpoint is disabled before the events come.
  await h.store.disable(heldId, 'gone');

  // Routed: delivered to `ok`, dead-lettered at `failing`, held for `held`, kept 7 days in EVENTS.
  for (const [who, n] of [[USER, 2], [OTHER, 2]] as const) {
    for (let i = 0; i < n; i++) await h.publish(tenant, 'user.updated', { userId: who, email: `${who}@example.com`, i });
  }
  await h.publish(tenant, 'organization.updated', { organizationId: 'org_kept', userId: OTHER });
  await h.publish(elsewhere, 'user.updated', { userId: USER, email: 'same id, other tenant' });
  // Rejected (an unknown event name), each with the user's id.
  await h.publish(tenant, 'user.nonsense', { userId: USER });
  await h.publish(tenant, 'user.nonsense', { userId: OTHER });
  await ok.waitFor(5);
  await otherTenant.waitFor(1);
  const deadLetters = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint: failingId });
    return page.data.length === 5 ? page.data : undefined;
  }, 30_000, 'five dead letters');
  await eventually(async () => ((await admin.listRejectedEvents({ tenant })).data.length === 2 ? true : undefined), 10_000, 'two rejected');

  // Not yet routed: the router is stopped while two more events come.
  await h.restart({ HOOKSTREAM_ROLES: 'api,delivery,deadletter,admin,projector' });
  ({ admin } = { admin: createAdminClient((await h.operator({ timeoutMs: 60_000 })).nc, { timeoutMs: 60_000, operator: 'dpo@example.com' }) });
  await h.publish(tenant, 'user.updated', { userId: USER, late: true });
  await h.publish(tenant, 'user.updated', { userId: OTHER, late: true });

  const before = await everyPayload();
  t.true(carrying(before, tenant, USER).length > 0);

  // (A delivery whose ack the restart lost may come again before the erasure: at least once.)
  const okBefore = ok.received.length;
  const r = await admin.eraseSubject({ tenant, user: USER });
  t.like(r, { tenant, subject: { kind: 'user', id: USER }, routing_caught_up: true });
  t.true(r.stores.unrouted_events.erased >= 1, 'the event published while the router was stopped');
  t.like(r.stores, {
    // 2 events to 3 endpoints: 2 delivered, 2 dead (removed from their queue), 2 held.
    deliveries: { erased: 2, already_gone: 4 },
    dead_letters: { erased: 2 },
    rejected: { erased: 1 },
    index: { entries: 2, erased: 2 },
  });
  // The 2 routed events, the rejected one's copy in EVENTS and the unrouted one.
  t.is(r.stores.events.erased + r.stores.unrouted_events.erased, 4);
  t.true(r.stores.attempts.erased >= 2, 'the dead deliveries\' failed attempts');

  // Nothing of the user is left in any stream of the tenant; everything else is.
  const after = await everyPayload();
  t.deepEqual(carrying(after, tenant, USER).filter((m) => !m.subject.startsWith(`events.${elsewhere}.`) && !m.subject.startsWith('erasure.')), []);
  const kept = (all: typeof before) => carrying(all, tenant, OTHER).map((m) => `${m.stream} ${m.subject}`).sort();
  t.deepEqual(kept(after), kept(before), "the other user's messages are all still there");
  t.true(after.some((m) => m.subject === `events.${elsewhere}.user.updated` && m.text.includes(USER)), "the other tenant's event with the same id");

  // Operator surfaces: dead letters, rejected events.
  const letters = (await admin.listDeadLetters({ endpoint: failingId })).data;
  t.is(letters.length, 3);
  for (const l of letters) {
    const shown = await admin.showDeadLetter({ id: l.id });
    t.notRegex(JSON.stringify(shown.message.body), new RegExp(USER));
  }
  t.true(deadLetters.length === 5);
  const rejected = (await admin.listRejectedEvents({ tenant })).data;
  t.is(rejected.length, 1);
  t.is((await admin.showRejectedEvent({ seq: rejected[0]!.seq })).body_text, JSON.stringify({ userId: OTHER }));

  // The held deliveries are never delivered: after a restore only the other user's arrive.
  await h.restart();
  ({ admin } = { admin: createAdminClient((await h.operator({ timeoutMs: 60_000 })).nc, { timeoutMs: 60_000, operator: 'dpo@example.com' }) });
  await h.store.restore(tenant as TenantId, heldId);
  const got = await held.waitFor(4);
  await new Promise((resolve) => setTimeout(resolve, 1000));
  t.is(held.received.length, 4, "the other user's 2 events, the organization event and the late one");
  t.false(held.received.some((m) => m.body.includes(USER)));
  t.true(got.some((m) => m.body.includes('"late":true')));
  // The late event of the other user was routed after the restart; the erased user's never was.
  await eventually(() => (ok.received.some((m) => m.body.includes('"late":true')) ? true : undefined), 20_000, 'the late event');
  t.false(ok.received.slice(okBefore).some((m) => m.body.includes(USER)));

  // Idempotent: a second run finds nothing.
  const again = await admin.eraseSubject({ tenant, user: USER });
  t.like(again.stores, {
    events: { erased: 0 }, unrouted_events: { erased: 0 }, deliveries: { erased: 0, already_gone: 0 }, attempts: { erased: 0 },
    dead_letters: { erased: 0 }, rejected: { erased: 0 }, index: { entries: 0, erased: 0 },
  });

  // Audited: who, which subject, the counts; never a payload.
  const audit = (await admin.listAudit({ action: 'erasure.subject' })).data;
  t.is(audit.length, 2);
  t.like(audit[1], { operator: 'dpo@example.com', target: `${tenant} user ${USER}`, outcome: 'ok' });
  t.regex(audit[1]!.detail!, /deliveries 2/);
  t.notRegex(audit[1]!.detail!, /example\.com/);
});

test.serial('an organization is erased by its id; its members\' other events are not', async (t) => {
  const tenant = 'tenant_erase_org';
  const r = await h.receiver(() => 204);
  await endpoint(tenant, r);
  await h.publish(tenant, 'organization.updated', { organizationId: 'org_gone', name: 'Gone Inc' });
  await h.publish(tenant, 'organizationMembership.created', { organizationId: 'org_gone', userId: 'user_member' });
  await h.publish(tenant, 'user.updated', { userId: 'user_member' });
  await r.waitFor(3);
  const out = await admin.eraseSubject({ tenant, organization: 'org_gone' });
  // An event delivered and not yet acked by the router is erased as unrouted; its index entry then finds it gone.
  t.is(out.stores.events.erased + out.stores.unrouted_events.erased, 2);
  t.is(out.stores.index.entries, 2);
  const left = (await everyPayload()).filter((m) => m.subject.startsWith(`events.${tenant}.`));
  t.deepEqual(left.map((m) => m.subject), [`events.${tenant}.user.updated`]);
});

test.serial('erasure during a burst of events loses none of the others', async (t) => {
  const tenant = 'tenant_erase_burst';
  const r = await h.receiver(() => 204);
  await endpoint(tenant, r);
  for (let i = 0; i < 20; i++) await h.publish(tenant, 'user.updated', { userId: USER, i });
  const burst = (async () => {
    const acks = [];
    for (let i = 0; i < 600; i++) acks.push(h.publish(tenant, 'user.updated', { userId: `user_b${i % 50}`, i }));
    await Promise.all(acks);
  })();
  const out = await admin.eraseSubject({ tenant, user: USER });
  await burst;
  t.true(out.routing_caught_up);
  t.true(out.stores.events.erased + out.stores.unrouted_events.erased === 20, `every event of the user: ${JSON.stringify(out.stores)}`);
  const others = () => new Set(r.received.map((m) => JSON.parse(m.body) as { data: { userId: string; i: number } })
    .filter((b) => b.data.userId !== USER).map((b) => b.data.i));
  await eventually(() => (others().size === 600 ? true : undefined), 60_000, 'every other event delivered');
  t.is(others().size, 600);
});

test.serial('an ordering key is erased by the key its producer named; the CLI prints what it erased and is audited under its operator', async (t) => {
  const tenant = 'tenant_erase_key';
  const r = await h.receiver(() => 204);
  await endpoint(tenant, r);
  const keyed = (userId: string) => {
    const headers = natsHeaders();
    headers.set('Hookstream-Ordering-Key', 'cart-77');
    return h.publish(tenant, 'user.updated', { userId }, { headers });
  };
  await keyed('user_k1');
  await keyed('user_k2');
  await h.publish(tenant, 'user.updated', { userId: 'user_k1' });
  await r.waitFor(3);
  const run = await runCli(['erase', '--tenant', tenant, '--key', 'cart-77', '--operator', 'dpo@example.com'],
    { ...process.env, NATS_URL: h.nats.url, ...PINNED });
  t.is(run.code, 0, run.stderr);
  t.regex(run.stdout, /erased key cart-77 of tenant_erase_key/);
  t.regex(run.stdout, /events \(routed\)\s+\d+[\s\S]*events \(not yet routed\)\s+\d+[\s\S]*deliveries queued/);
  const left = (await everyPayload()).filter((m) => m.subject.startsWith(`events.${tenant}.`));
  t.is(left.length, 1, 'the unkeyed event stays');
  const audit = (await admin.listAudit({ action: 'erasure.subject', operator: 'dpo@example.com' })).data;
  t.like(audit[0], { target: `${tenant} key cart-77`, outcome: 'ok' });
  const usage = await runCli(['erase', '--tenant', tenant, '--user', 'a', '--key', 'b'], { ...process.env, NATS_URL: h.nats.url, ...PINNED });
  t.is(usage.code, 2);
});

test.serial('erased deliveries waiting for their retry at the server, or parked behind their ordering key, are never sent', async (t) => {
  const tenant = 'tenant_erase_waiting';
  // The first attempt fails with Retry-After 2 s: the delivery waits at the server (ack pending), and a
  // later delivery of the same ordering key waits parked in the delivery role behind it.
  const r = await h.receiver((_req, n) => (n === 0 ? { status: 503, headers: { 'retry-after': '2' } } : 204));
  await h.store.create(tenant as TenantId, { url: r.url, events: ['*'], ordering: 'key' });
  const keyed = (userId: string) => {
    const headers = natsHeaders();
    headers.set('Hookstream-Ordering-Key', 'k1');
    return h.publish(tenant, 'user.updated', { userId }, { headers });
  };
  await keyed('user_head');
  await r.waitFor(1);
  await keyed('user_parked');
  await new Promise((resolve) => setTimeout(resolve, 300));
  t.like((await admin.eraseSubject({ tenant, user: 'user_head' })).stores, { deliveries: { erased: 1 } });
  t.like((await admin.eraseSubject({ tenant, user: 'user_parked' })).stores, { deliveries: { erased: 1 } });
  await keyed('user_after');
  await r.waitFor(2);
  await new Promise((resolve) => setTimeout(resolve, 3000));
  t.deepEqual(r.received.map((m) => (JSON.parse(m.body) as { data: { userId: string } }).data.userId), ['user_head', 'user_after'],
    'the failed first attempt, then only the event published after the erasures');
});

test.serial('a tenant that leaves: `erase --tenant T --everything` removes everything of it and nothing of another', async (t) => {
  const tenant = 'tenant_leaving';
  const staying = 'tenant_staying';
  const failing = await h.receiver(() => 500);
  const held = await h.receiver(() => 204);
  const kept = await h.receiver(() => 204);
  const failingId = await endpoint(tenant, failing);
  const heldId = await endpoint(tenant, held);
  await endpoint(staying, kept);
  await h.store.disable(heldId, 'gone');
  await createApiKey(h.service.orm!.em.fork(), tenant as TenantId, 'leaving');
  await createApiKey(h.service.orm!.em.fork(), staying as TenantId, 'staying');
  await h.publish(tenant, 'user.updated', { userId: 'user_leaving' });
  await h.publish(tenant, 'user.nonsense', { userId: 'user_leaving' });
  await h.publish(staying, 'user.updated', { userId: 'user_staying' });
  await kept.waitFor(1);
  await eventually(async () => ((await admin.listDeadLetters({ endpoint: failingId })).data.length === 1 ? true : undefined), 30_000, 'a dead letter');
  await eventually(async () => ((await admin.listRejectedEvents({ tenant })).data.length === 1 ? true : undefined), 10_000, 'a rejected event');
  t.true((await h.service.orm!.em.fork().execute('select 1 from erasure_index where tenant = ?', [tenant])).length >= 1, 'indexed before');
  // The sealed signing secrets in the endpoints' history, and the store files that hold them.
  const sealed: string[] = [];
  for (const id of [failingId, heldId]) {
    for (let seq = 1; ; seq++) {
      const m = await h.service.jsm.streams.getMessage('ENDPOINTS', { next_by_subj: `endpoints.${id}`, seq } as never).catch(() => null);
      if (!m) break;
      sealed.push(...[...Buffer.from(m.data).toString('utf8').matchAll(/"(?:secret|sealed)":"([^"]+)"/g)].map((x) => x[1]!));
      seq = m.seq;
    }
  }
  t.true(sealed.length >= 2, 'a sealed secret of each endpoint');
  t.true(sealed.every((v) => storeFilesHolding(v).length > 0), 'on disk before');
  // The tenant's data keys (its own and user_leaving's), as sealed in DATA_KEYS' store file.
  const dataKeys: Uint8Array[] = [];
  for await (const m of messagesOf(h.service.jsm, DATA_KEYS_STREAM, `data_keys.${tenant}.>`)) dataKeys.push(m.data);
  t.is(dataKeys.length, 2);
  const deliveryBody = (await h.service.jsm.streams.getMessage(deliveryAddress(heldId, h.config.deliveryShards).stream,
    { next_by_subj: deliveryAddress(heldId, h.config.deliveryShards).subject, seq: 1 } as never))!.data;

  const run = await runCli(['erase', '--tenant', tenant, '--everything', '--json', '--operator', 'dpo@example.com'], {
    ...process.env, ...PINNED, NATS_URL: h.nats.url, DATABASE_URL: h.db.url, HOOKSTREAM_MASTER_KEY: h.keys.masterKey,
    HOOKSTREAM_DELIVERY_SHARDS: String(h.config.deliveryShards), HOOKSTREAM_RETRY_SCHEDULE: '100ms,100ms',
  });
  t.is(run.code, 0, run.stderr);
  const out = JSON.parse(run.stdout) as { endpoints: number; stores: Record<string, number> };
  t.is(out.endpoints, 2);
  // The held delivery goes with its endpoint's delete (the delivery role's) or with the purge here: either way, not in any stream below.
  t.like(out.stores, { dead_letters: 1, api_keys: 1, rejected: 1, endpoint_rows: 2 });
  t.true(out.stores['endpoint_events']! >= 4, 'created, disabled and deleted events of both');
  t.true(out.stores['events']! >= 2);
  t.is(out.stores['data_keys'], 2);
  t.deepEqual(dataKeys.flatMap(storeFilesHolding), [], 'no data key of the tenant is left in any store file');
  const bodies = createDataKeys({ nc: h.service.nc, jsm: h.service.jsm, masterKey: h.keys.masterKey });
  t.teardown(() => bodies.close());
  await t.throwsAsync(async () => bodies.open(deliveryBody), { instanceOf: DataKeyErasedError }, 'a copy of a delivery body no longer opens');

  const all = await everyPayload();
  t.deepEqual(all.filter((m) => m.subject.includes(tenant) || m.text.includes(tenant) || m.text.includes('user_leaving')).map((m) => `${m.stream} ${m.subject}`), []);
  for (const id of [failingId, heldId]) {
    const left = await h.service.jsm.streams.info('ENDPOINTS', { subjects_filter: `endpoints.${id}` });
    t.is(left.state.subjects?.[`endpoints.${id}`] ?? 0, 0, `no event of ${id} in ENDPOINTS`);
  }
  t.deepEqual(sealed.flatMap(storeFilesHolding), [], 'no sealed secret is left in any store file (secure erase)');
  const em = h.service.orm!.em.fork();
  for (const table of ['endpoints', 'api_keys', 'dead_letters', 'idempotency_keys', 'portal_sessions', 'erasure_index']) {
    t.deepEqual(await em.execute(`select 1 from ${table} where tenant = ?`, [tenant]), [], table);
  }
  t.is((await em.execute('select 1 from api_keys where tenant = ?', [staying])).length, 1);
  t.like((await admin.listAudit({ action: 'erasure.tenant' })).data[0], { operator: 'dpo@example.com', target: tenant, outcome: 'ok' });

  // The other tenant goes on.
  await h.publish(staying, 'user.updated', { userId: 'user_staying', again: true });
  await kept.waitFor(2);
  t.is(failing.received.length, 3, 'the leaving tenant\'s endpoint got nothing more');
});
