// The admin subject: listing and showing dead letters with every filter and page, and a structured error
// for every kind of bad request (the role keeps answering after each). Real NATS, Postgres, receivers.
import test from 'ava';
import type { NatsConnection } from '@nats-io/nats-core';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import { AdminRequestError, type AdminClient } from '../src/admin/client.ts';
import type { DeadLetterOut } from '../src/admin/protocol.ts';
import type { TenantId } from '../src/domain/ids.ts';

let h: TestService;
let nc: NatsConnection;
let admin: AdminClient;
let failing: Receiver;
const endpoints: Record<string, string> = {};
let all: DeadLetterOut[] = [];

const errorOf = async (p: Promise<unknown>): Promise<AdminRequestError> => {
  try {
    await p;
  } catch (e) {
    if (e instanceof AdminRequestError) return e;
    throw e;
  }
  throw new Error('expected an error reply');
};

test.before(async () => {
  h = await startTestService('admin', { HOOKSTREAM_RETRY_SCHEDULE: '300ms,600ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '2s' });
  ({ nc, admin } = await h.operator({ timeoutMs: 10_000 }));
  failing = await h.receiver(() => 500);
  const a = await h.store.create('tenant_a' as TenantId, { url: failing.url, events: ['user.*'] });
  const b = await h.store.create('tenant_b' as TenantId, { url: failing.url, events: ['*'] });
  endpoints['a'] = a.endpoint.id;
  endpoints['b'] = b.endpoint.id;
  await h.publish('tenant_a', 'user.created', { userId: 'user_1' });
  await h.publish('tenant_a', 'user.created', { userId: 'user_2' });
  await h.publish('tenant_a', 'user.banned', { userId: 'user_3' });
  await h.publish('tenant_b', 'organization.created', { organizationId: 'org_1' });
  await h.publish('tenant_b', 'organization.created', { organizationId: 'org_2' });
  all = await eventually(async () => {
    const page = await admin.listDeadLetters({ limit: 100 });
    return page.data.length === 5 ? page.data : undefined;
  }, 30_000, 'five dead letters');
});

test.after.always(() => h?.closeAll());

test('list: newest first, every field, and each filter narrows', async (t) => {
  const ids = all.map((d) => d.id);
  t.deepEqual(ids, [...ids].sort().reverse(), 'newest (largest id) first');
  const one = all.find((d) => d.event_type === 'user.banned')!;
  t.like(one, { endpoint_id: endpoints['a'], tenant: 'tenant_a', status: 'dead', attempts: 3, last_status: 500, dead_count: 1, replay_count: 0, last_replayed_at: null });
  t.regex(one.webhook_id, /^msg_/);
  t.false(Number.isNaN(Date.parse(one.failed_at)));

  t.is((await admin.listDeadLetters({ tenant: 'tenant_a' })).data.length, 3);
  t.is((await admin.listDeadLetters({ tenant: 'tenant_b' })).data.length, 2);
  t.is((await admin.listDeadLetters({ endpoint: endpoints['b'] })).data.length, 2);
  t.deepEqual((await admin.listDeadLetters({ event: 'user.created' })).data.map((d) => d.event_type), ['user.created', 'user.created']);
  t.is((await admin.listDeadLetters({ tenant: 'tenant_b', event: 'user.created' })).data.length, 0);
  t.is((await admin.listDeadLetters({ status: 'dead' })).data.length, 5);
  t.is((await admin.listDeadLetters({ status: 'replayed' })).data.length, 0);
  t.is((await admin.listDeadLetters({ tenant: 'tenant_nobody' })).data.length, 0);
});

test('list: time range on failed_at', async (t) => {
  const times = all.map((d) => Date.parse(d.failed_at)).sort((a, b) => a - b);
  const first = new Date(times[0]!).toISOString();
  const afterLast = new Date(times[times.length - 1]! + 1).toISOString();
  t.is((await admin.listDeadLetters({ since: first })).data.length, 5, 'since is inclusive');
  t.is((await admin.listDeadLetters({ until: first })).data.length, 0, 'until is exclusive');
  t.is((await admin.listDeadLetters({ since: first, until: afterLast })).data.length, 5);
  t.is((await admin.listDeadLetters({ since: afterLast })).data.length, 0);
  t.is((await admin.listDeadLetters({ until: '2000-01-01' })).data.length, 0, 'a date alone is accepted');
});

test('list: pages by cursor cover everything exactly once', async (t) => {
  const seen: string[] = [];
  let cursor: string | undefined;
  let pages = 0;
  do {
    const page = await admin.listDeadLetters({ limit: 2, ...(cursor ? { cursor } : {}) });
    t.true(page.data.length <= 2);
    seen.push(...page.data.map((d) => d.id));
    cursor = page.next_cursor ?? undefined;
    pages++;
  } while (cursor);
  t.is(pages, 3);
  t.deepEqual(seen, all.map((d) => d.id));
  // The cursor keeps the filter's meaning when the filter is sent again.
  const first = await admin.listDeadLetters({ tenant: 'tenant_a', limit: 2 });
  const second = await admin.listDeadLetters({ tenant: 'tenant_a', limit: 2, cursor: first.next_cursor! });
  t.is(second.data.length, 1);
  t.is(second.next_cursor, null);
});

test('show: metadata and the opened original message', async (t) => {
  const banned = all.find((d) => d.event_type === 'user.banned')!;
  const shown = await admin.showDeadLetter({ id: banned.id });
  t.deepEqual(shown.dead_letter, banned);
  t.deepEqual(shown.message.body, { type: 'user.banned', data: { userId: 'user_3' } });
  t.deepEqual(shown.message.headers['webhook-id'], [banned.webhook_id]);
  t.deepEqual(shown.message.headers['hookstream-endpoint'], [endpoints['a']]);
  t.regex(shown.message.subject, new RegExp(`^deliveries\\.\\d+\\.${endpoints['a']}$`));
  // It is what the endpoint was sent.
  const sent = failing.received.find((r) => r.headers['webhook-id'] === banned.webhook_id)!;
  t.deepEqual(JSON.parse(sent.body), shown.message.body);
});

test('malformed requests get structured errors, and the role goes on answering', async (t) => {
  const raw = async (subject: string, payload: string) => admin.raw(subject, payload) as Promise<{ error?: { code: string; message: string } }>;
  t.like(await raw('admin.dead_letters.list', '{not json'), { error: { code: 'bad_request', message: 'request is not valid JSON' } });
  t.like(await raw('admin.dead_letters.list', '[1,2]'), { error: { code: 'bad_request' } });
  t.like(await raw('admin.dead_letters.list', '"text"'), { error: { code: 'bad_request' } });
  t.like(await raw('admin.nothing.here', '{}'), { error: { code: 'not_found' } });
  t.like(await raw('admin.dead_letters.show', ''), { error: { code: 'bad_request', message: 'id is required' } });
  // An empty payload is an empty object.
  t.is(((await raw('admin.dead_letters.list', '')) as { data: unknown[] }).data.length, 5);
  t.is((await admin.listDeadLetters({})).data.length, 5, 'an empty request from the client lists them all too');
});

test('bad filters name the field', async (t) => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ tenant: 'has.dot' }, /^tenant must be/],
    [{ tenant: 42 }, /^tenant must be a non-empty string/],
    [{ endpoint: 'ep_1' }, /^endpoint must be an endpoint id/],
    [{ event: 'user.exploded' }, /^event "user\.exploded" is not an event name/],
    [{ since: 'yesterday' }, /^since must be an ISO 8601 time/],
    [{ until: '2026-13-45T99:00:00Z' }, /^until must be an ISO 8601 time/],
    [{ since: '2026-02-01', until: '2026-01-01' }, /^since must be before until/],
    [{ status: 'gone' }, /^status must be dead or replayed/],
    [{ limit: 0 }, /^limit must be a whole number/],
    [{ limit: 1.5 }, /^limit must be a whole number/],
    [{ limit: 100_000 }, /^limit must be a whole number/],
    [{ cursor: 'bm90IGEgY3Vyc29y' }, /^cursor is not one this service handed out/],
    [{ tenant_id: 'tenant_a' }, /^unknown field tenant_id; allowed: /],
  ];
  for (const [body, message] of cases) {
    const e = await errorOf(admin.listDeadLetters(body as never));
    t.is(e.code, 'bad_request', JSON.stringify(body));
    t.regex(e.message, message, JSON.stringify(body));
  }
});

test('unknown and malformed ids', async (t) => {
  t.like(await errorOf(admin.showDeadLetter({ id: 'dl_0000000000000000000000000a' })), { code: 'not_found' });
  t.like(await errorOf(admin.replayDeadLetter({ id: 'dl_0000000000000000000000000a' })), { code: 'not_found' });
  t.like(await errorOf(admin.showDeadLetter({ id: 'webhook_123' })), { code: 'bad_request' });
  t.like(await errorOf(admin.replayDeadLetter({ id: all[0]!.id, force: 'yes' as never })), { code: 'bad_request', message: 'force must be true or false' });
  t.like(await errorOf(admin.replayDeadLetters({})), { code: 'bad_request' });
  const unknownField = await errorOf(admin.replayDeadLetters({ status: 'dead' } as never));
  t.is(unknownField.code, 'bad_request');
  t.regex(unknownField.message, /^unknown field status/);
  t.like(await errorOf(admin.showDelivery({ webhook_id: 'nope', endpoint: endpoints['a']! })), { code: 'bad_request' });
  t.like(await errorOf(admin.showDelivery({ webhook_id: 'msg_x' } as never)), { code: 'bad_request', message: 'endpoint is required' });
  t.like(await errorOf(admin.showDelivery({ webhook_id: all[0]!.webhook_id, endpoint: 'webhook_000nothere' })), { code: 'not_found' });
});

test('a dead letter is delivered to no other endpoint: deliveries show says not found for one that does not subscribe', async (t) => {
  // tenant_b's events never went to tenant_a's endpoint.
  const orgLetter = all.find((d) => d.tenant === 'tenant_b')!;
  const e = await errorOf(admin.showDelivery({ webhook_id: orgLetter.webhook_id, endpoint: endpoints['a']! }));
  t.is(e.code, 'not_found');
  t.regex(e.message, /does not subscribe/);
  const dead = await admin.showDelivery({ webhook_id: orgLetter.webhook_id, endpoint: endpoints['b']! });
  t.like(dead, { state: 'dead', attempts: 3, last_status: 500, tenant: 'tenant_b', event_type: 'organization.created', queued: null });
  t.is(dead.dead_letter?.id, orgLetter.id);
  t.is(dead.history.length, 3);
  t.deepEqual(dead.history.map((r) => r.attempt), [1, 2, 3]);
  t.is(dead.history[2]!.next_attempt_at, null);
});

test.serial('several admin instances share the subject: each request is answered exactly once', async (t) => {
  // A second subscriber in the same queue group stands in for a second instance.
  const { ADMIN_QUEUE } = await import('../src/admin/protocol.ts');
  let byOther = 0;
  const other = nc.subscribe('admin.>', {
    queue: ADMIN_QUEUE,
    callback: (_e, m) => { byOther++; m.respond(JSON.stringify({ data: [], next_cursor: null })); },
  });
  await nc.flush();
  let replies = 0;
  for (let i = 0; i < 10; i++) {
    // Collect every reply that arrives within the window: a queue group yields one.
    for await (const _m of await nc.requestMany('admin.dead_letters.list', '{}', { strategy: 'timer', maxWait: 300 })) replies++;
  }
  other.unsubscribe();
  t.is(replies, 10);
  t.true(byOther < 10, 'the service answered some of them');
});
