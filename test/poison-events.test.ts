// Poison events (issue 8, point 3): every event the router cannot route gets a verdict. Each kind is
// rejected, counted, logged without its body, kept in REJECTED where an operator reads it through the
// admin subject, and terminated, so the router's consumer is back to nothing pending and a later event
// is delivered. Real nats-server, real receiver on loopback. Serial: one test restarts the service.
import test from 'ava';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { storedEventSubject } from './helpers/direct-env.ts';
import { createAdminClient, type AdminClient } from '../src/admin/client.ts';
import type { RejectedEventOut } from '../src/admin/protocol.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { EVENTS_STREAM, ROUTER_CONSUMER } from '../streams/events.ts';
import { ensureRejectedStream, REJECTED_STREAM } from '../streams/rejected.ts';

let h: TestService;
let admin: AdminClient;
const logs: string[] = [];

test.before(async () => {
  // warn: the rejections' log lines are checked.
  h = await startTestService('poison', { HOOKSTREAM_LOG_LEVEL: 'warn' }, { logWrite: (line) => logs.push(line) });
  admin = createAdminClient(h.service.nc, { timeoutMs: 10_000 });
});
test.after.always(() => h?.closeAll());

const publish = (tenant: string, type: string, body: string | Uint8Array) => h.publishRaw(tenant, type, body);
const rejectedCount = (reason: string) => h.service.metrics.eventsRejected.get({ reason });

/** The router's consumer holds nothing: every event read has its verdict. */
async function routerIdle(): Promise<void> {
  await eventually(async () => {
    const c = await h.service.jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER);
    return c.num_pending === 0 && c.num_ack_pending === 0 ? true : undefined;
  }, 20_000, 'the router consumer to hold nothing');
}

/** The operator's view of a tenant's rejected events, newest first. */
async function rejectedFor(tenant: string): Promise<RejectedEventOut[]> {
  return (await admin.listRejectedEvents({ tenant, limit: 500 })).data;
}

/** Publish a poison event and a valid one after it; returns the rejection the operator sees. */
async function poison(t: { is: (a: unknown, b: unknown, m?: string) => void; true: (v: boolean, m?: string) => void }, opts: {
  tenant: string; type: string; body: string | Uint8Array; reason: string;
}): Promise<RejectedEventOut> {
  const r = await h.receiver();
  await h.store.create(opts.tenant as TenantId, { url: r.url, events: ['*'] });
  const before = rejectedCount(opts.reason);
  const ack = await publish(opts.tenant, opts.type, opts.body);
  await publish(opts.tenant, 'user.updated', JSON.stringify({ userId: 'user_after' }));
  const [got] = await r.waitFor(1, 20_000);
  t.is(JSON.parse(got!.body).data.userId, 'user_after', 'the event after the poison one is delivered');
  await eventually(() => (rejectedCount(opts.reason) === before + 1 ? true : undefined), 10_000, `a ${opts.reason} rejection counted`);
  await routerIdle();
  const rows = await rejectedFor(opts.tenant);
  t.is(rows.length, 1, 'one rejection recorded');
  const row = rows[0]!;
  t.is(row.reason, opts.reason);
  t.is(row.events_seq, ack.seq);
  t.is(row.subject, `events.${opts.tenant}.${opts.type}`);
  t.is(row.tenant, opts.tenant);
  t.is(row.size, typeof opts.body === 'string' ? Buffer.byteLength(opts.body) : opts.body.byteLength);
  t.true(!('body_base64' in row), 'a listing carries no body');
  t.is(r.received.length, 1, 'the poison event reached nobody');
  return row;
}

test.serial('100,000 levels of nesting in ~200 KB: too_deep', async (t) => {
  const body = `{"a":${'['.repeat(99_999)}1${']'.repeat(99_999)}}`;
  t.true(body.length > 190_000);
  const row = await poison(t, { tenant: 'tenant_deep', type: 'user.updated', body, reason: 'too_deep' });
  t.is(row.detail, 'body nests deeper than 64 levels');
  // The operator can read the whole body back, exactly.
  const shown = await admin.showRejectedEvent({ seq: row.seq });
  t.is(shown.body_text, body);
  t.false(shown.rejected.truncated);
});

test.serial('200 KB of invalid UTF-8: invalid_utf8, stored as the original bytes (not re-encoded)', async (t) => {
  const body = new Uint8Array(200_000).fill(0xff);
  const row = await poison(t, { tenant: 'tenant_utf8', type: 'organization.updated', body, reason: 'invalid_utf8' });
  const shown = await admin.showRejectedEvent({ seq: row.seq });
  t.is(shown.body_text, null);
  t.deepEqual(Buffer.from(shown.body_base64, 'base64'), Buffer.from(body));
});

test.serial('not a JSON object, not JSON at all, unknown event name', async (t) => {
  await poison(t, { tenant: 'tenant_array', type: 'user.updated', body: '["SECRET-MARKER-array"]', reason: 'not_an_object' });
  await poison(t, { tenant: 'tenant_text', type: 'user.updated', body: 'SECRET-MARKER-text', reason: 'invalid_json' });
  const row = await poison(t, { tenant: 'tenant_name', type: 'user.exploded', body: '{"m":"SECRET-MARKER-name"}', reason: 'unknown_event' });
  t.is(row.event, 'user.exploded');
  // Logged with subject and reason, never with the body.
  const lines = logs.filter((l) => l.includes('"event rejected"'));
  // The subject as stored (with HOOKSTREAM_EVENT_PARTITIONS, its partition's token after the tenant).
  const stored = (tenant: string, type: string) => storedEventSubject(tenant, type, h.config.eventPartitions);
  t.true(lines.some((l) => l.includes(stored('tenant_array', 'user.updated')) && l.includes('not_an_object')));
  t.true(lines.some((l) => l.includes(stored('tenant_name', 'user.exploded')) && l.includes('unknown_event')));
  t.false(logs.some((l) => l.includes('SECRET-MARKER')), 'no log line holds a body');
});

test.serial('at the default limit: an event over 256 KiB never enters EVENTS; one just under it is delivered', async (t) => {
  t.is(h.config.maxEventBytes, 262_144);
  const r = await h.receiver();
  const tenant = 'tenant_big';
  await h.store.create(tenant as TenantId, { url: r.url, events: ['user.*'] });
  const over = JSON.stringify({ userId: 'user_1', pad: 'x'.repeat(300_000) });
  await t.throwsAsync(() => publish(tenant, 'user.updated', over), { message: /size|maximum/i });
  const under = JSON.stringify({ userId: 'user_2', pad: 'y'.repeat(262_144 - 40) });
  t.true(under.length <= 262_144 && under.length > 262_000);
  await publish(tenant, 'user.updated', under);
  const [got] = await r.waitFor(1, 20_000);
  t.is(JSON.parse(got!.body).data.userId, 'user_2');
  t.is(got!.body.length, Buffer.byteLength(JSON.stringify({ type: 'user.updated', data: JSON.parse(under) })));
  await routerIdle();
  t.deepEqual(await rejectedFor(tenant), []);
});

test.serial('an exception while routing an event rejects it as route_failed; other tenants are not held', async (t) => {
  const directory = h.service.directory!;
  const activeFor = directory.activeFor.bind(directory);
  directory.activeFor = (tenant: TenantId): ReturnType<typeof activeFor> => {
    if (tenant === 'tenant_boom') throw new TypeError('matching exploded');
    return activeFor(tenant);
  };
  try {
    const before = rejectedCount('route_failed');
    const r = await h.receiver();
    await h.store.create('tenant_calm' as TenantId, { url: r.url, events: ['*'] });
    await publish('tenant_boom', 'user.updated', '{"a":1}');
    await publish('tenant_calm', 'user.updated', '{"a":2}');
    await r.waitFor(1, 20_000);
    await eventually(() => (rejectedCount('route_failed') === before + 1 ? true : undefined), 10_000, 'route_failed counted');
    await routerIdle();
    const [row] = await rejectedFor('tenant_boom');
    t.is(row?.reason, 'route_failed');
    t.is(row?.detail, 'TypeError: matching exploded');
    t.is(row?.deliveries, 1, 'rejected at once: the exception would repeat');
  } finally {
    directory.activeFor = activeFor;
  }
});

const BIN = fileURLToPath(new URL('../bin/hookstream', import.meta.url));
const cli = (args: string[]) => new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
  execFile(BIN, args, { env: { ...process.env, NATS_URL: h.nats.url, DATABASE_URL: h.db.url, HOOKSTREAM_DELIVERY_SHARDS: '2' }, timeout: 60_000 },
    (error, stdout, stderr) => resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr }));
});

test.serial('hookstream events rejected: a table without bodies, --json, and --show with the body', async (t) => {
  const table = await cli(['events', 'rejected', '--tenant', 'tenant_array']);
  t.is(table.code, 0, table.stderr);
  const lines = table.stdout.trim().split('\n');
  t.regex(lines[0]!, /^SEQ\s+REJECTED AT\s+REASON\s+TENANT\s+EVENT\s+SIZE\s+EVENTS SEQ\s+DETAIL$/);
  t.is(lines.length, 2);
  t.regex(lines[1]!, /^\d+\s+\S+\s+not_an_object\s+tenant_array\s+user\.updated\s+23\s+\d+\s+body is not a JSON object$/);
  t.false(table.stdout.includes('SECRET-MARKER'), 'the listing shows no body');
  const json = await cli(['events', 'rejected', '--tenant', 'tenant_array', '--json']);
  const [row] = (JSON.parse(json.stdout) as { data: RejectedEventOut[] }).data;
  t.is(row?.reason, 'not_an_object');
  const shown = await cli(['events', 'rejected', '--show', String(row!.seq)]);
  t.is(shown.code, 0, shown.stderr);
  t.regex(shown.stdout, /rejected event \d+: not_an_object/);
  t.true(shown.stdout.includes('["SECRET-MARKER-array"]'));
  const wrong = await cli(['events', 'rejected', '--show', 'x']);
  t.is(wrong.code, 2);
});

test.serial('when the rejection cannot be stored, the event is not terminated: it comes back and is rejected later', async (t) => {
  await h.service.jsm.streams.delete(REJECTED_STREAM);
  const retriedBefore = h.service.metrics.eventsRetried.get();
  const before = rejectedCount('not_an_object');
  const ack = await publish('tenant_later', 'user.updated', '[1]');
  await eventually(() => (h.service.metrics.eventsRetried.get() > retriedBefore ? true : undefined), 10_000, 'a retry');
  t.is(rejectedCount('not_an_object'), before, 'not counted as rejected while it is not stored');
  const held = await h.service.jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER);
  t.is(held.num_ack_pending + held.num_pending + held.num_redelivered > 0, true, 'still the router\'s: not terminated');
  await ensureRejectedStream(h.service.jsm);
  await eventually(() => (rejectedCount('not_an_object') === before + 1 ? true : undefined), 20_000, 'rejected once REJECTED is back');
  await routerIdle();
  const [row] = await rejectedFor('tenant_later');
  t.is(row?.events_seq, ack.seq);
  t.true((row?.deliveries ?? 0) >= 2);
});

test.serial('the admin subject pages newest first, filters by tenant, and refuses bad requests', async (t) => {
  const tenant = 'tenant_pages';
  const seqs: number[] = [];
  for (let i = 0; i < 5; i++) seqs.push((await publish(tenant, 'user.updated', `[${i}]`)).seq);
  await eventually(async () => ((await rejectedFor(tenant)).length === 5 ? true : undefined), 10_000, 'five rejections');
  const first = await admin.listRejectedEvents({ tenant, limit: 2 });
  t.deepEqual(first.data.map((r) => r.events_seq), [seqs[4], seqs[3]]);
  t.truthy(first.next_cursor);
  const rest: RejectedEventOut[] = [];
  for (let c = first.next_cursor; c;) {
    const page = await admin.listRejectedEvents({ tenant, limit: 2, cursor: c });
    rest.push(...page.data);
    c = page.next_cursor;
  }
  t.deepEqual(rest.map((r) => r.events_seq), [seqs[2], seqs[1], seqs[0]]);
  // Unfiltered: every tenant, newest first.
  const all = (await admin.listRejectedEvents({ limit: 500 })).data;
  // REJECTED was recreated by the test before: tenant_later's record and these five.
  t.true(all.length >= 6);
  t.true(all.every((r, i) => i === 0 || r.seq < all[i - 1]!.seq));
  t.true(new Set(all.map((r) => r.tenant)).size >= 2);
  t.deepEqual(await rejectedFor('tenant_never'), []);
  await t.throwsAsync(() => admin.listRejectedEvents({ tenant: 'bad tenant' }), { message: /tenant/ });
  await t.throwsAsync(() => admin.listRejectedEvents({ cursor: 'nope' }), { message: /cursor/ });
  await t.throwsAsync(() => admin.listRejectedEvents({ limit: 0 }), { message: /limit/ });
  await t.throwsAsync(() => admin.showRejectedEvent({ seq: 999_999 }), { message: /not found/ });
});

test.serial('with a smaller HOOKSTREAM_MAX_EVENT_BYTES, a larger event is too_large and kept cut at the limit', async (t) => {
  await h.restart({ HOOKSTREAM_MAX_EVENT_BYTES: '65536' });
  admin = createAdminClient(h.service.nc, { timeoutMs: 10_000 });
  const body = JSON.stringify({ userId: 'user_1', pad: 'z'.repeat(100_000) });
  const row = await poison(t, { tenant: 'tenant_large', type: 'user.updated', body, reason: 'too_large' });
  t.true(row.truncated);
  t.regex(row.detail, /the limit is 65536/);
  const shown = await admin.showRejectedEvent({ seq: row.seq });
  t.is(Buffer.from(shown.body_base64, 'base64').length, 65_536);
  t.is(shown.body_text, body.slice(0, 65_536));
});
