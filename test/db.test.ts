// The database layer against the machine's real Postgres: opening (create, migrate, fail fast), the
// schema matching the entities, constraints, and the tenant-scoped endpoint queries.
import test from 'ava';
import pg from 'pg';
import { randomBytes } from 'node:crypto';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { createTestDatabase, testPostgresAdminUrl, type TestDatabase } from './helpers/database.ts';
import { openDatabase, closeDatabase, type Database } from '../src/db/orm.ts';
import { ApiKey, DeadLetter, EndpointRecord } from '../src/db/entities.ts';
import { getEndpoint, listEndpoints, type EndpointRow } from '../src/endpoints/queries.ts';
import { newIdBody, type EndpointId, type TenantId } from '../src/domain/ids.ts';
import { UnreachableError, isHookstreamError, ErrorCode } from '../src/errors.ts';
import { silentLogger } from '../src/log.ts';

let db: TestDatabase;
let orm: Database;
const cleanups: (() => Promise<unknown>)[] = [];

test.before(async () => {
  db = await createTestDatabase('db');
  cleanups.push(() => db.drop());
  orm = await openDatabase(db.url, silentLogger);
  cleanups.push(() => closeDatabase(orm));
});

test.after.always(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
});

/** Every migration, in the order they run: a new one is added here once. */
const MIGRATIONS = [
  '0001-initial',
  '0002-signature-scheme',
  '0003-rate-limit-and-disabled',
  '0004-dead-letter-source',
  '0005-projection-skips',
  '0006-idempotency-keys',
  '0007-operators-and-audit',
  '0008-dead-letter-tag',
  '0009-portal-sessions',
  '0010-idempotent-answers',
  '0011-endpoint-ordering',
  '0012-dead-letter-subjects',
  '0013-dead-letter-trace',
  '0014-erasure-index',
  '0015-dead-letter-replays',
  '0016-tenant-limits',
  '0017-delivery-log',
  '0018-attempt-rates',
  '0019-operator-disabled',
];

const newId = () => `webhook_${newIdBody()}`;

function record(tenant: string, id = newId()): EndpointRecord {
  const now = new Date();
  return { id, tenant, url: `https://example.com/${id}`, events: ['user.*'], description: null, status: 'active', signatureScheme: 'v1', signingPublicKey: null, rateLimit: null, ordering: 'none', disabledReason: null, disabledAt: null, createdAt: now, updatedAt: now, version: 1 };
}

test('migrations create exactly the schema the entities describe', async (t) => {
  const diff = await orm.schema.getUpdateSchemaSQL({ wrap: false });
  t.is(diff.replace(/set names '[^']*';/g, '').trim(), '');
  const executed = await orm.migrator.getExecuted();
  t.deepEqual(executed.map((m) => m.name), MIGRATIONS);
});

test('opening creates a missing database, and opening again (also twice at once) migrates nothing twice', async (t) => {
  const name = `hookstream_test_create_${randomBytes(4).toString('hex')}`;
  const adminDbUrl = await testPostgresAdminUrl();
  const url = new URL(adminDbUrl);
  url.pathname = `/${name}`;
  cleanups.push(async () => {
    const admin = new pg.Client({ connectionString: adminDbUrl });
    await admin.connect();
    await admin.query(`drop database if exists "${name}" with (force)`);
    await admin.end();
  });
  const [a, b] = await Promise.all([openDatabase(url.toString(), silentLogger), openDatabase(url.toString(), silentLogger)]);
  try {
    t.deepEqual((await a.migrator.getExecuted()).map((m) => m.name), MIGRATIONS);
    t.deepEqual(await b.migrator.getPending(), []);
    t.deepEqual(await a.em.fork().find(EndpointRecord, {}), []);
  } finally {
    await closeDatabase(a);
    await closeDatabase(b);
  }
  const c = await openDatabase(url.toString(), silentLogger);
  await closeDatabase(c);
  t.pass();
});

test('an unreachable Postgres fails at once with one line naming the URL without its password', async (t) => {
  const error = await t.throwsAsync(openDatabase('postgres://hook:s3cret-pw@127.0.0.1:1/hookstream', silentLogger), { instanceOf: UnreachableError });
  t.true(isHookstreamError(error, ErrorCode.Unreachable));
  t.true(error.message.includes('postgres://hook:***@127.0.0.1:1/hookstream'));
  t.false(error.message.includes('s3cret-pw'));
  t.regex(error.message, /pg_ctlcluster|docker compose up postgres/);
  t.false(error.message.includes('\n'));
});

test('a server that accepts connections but never answers fails after the connect timeout', async (t) => {
  const sockets = new Set<Socket>();
  const silent = createServer((s) => { sockets.add(s); });
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  t.teardown(() => { for (const s of sockets) s.destroy(); silent.close(); });
  const { port } = silent.address() as AddressInfo;
  const url = `postgres://postgres:pw@127.0.0.1:${port}/hookstream`;
  const error = await t.throwsAsync(openDatabase(url, silentLogger, { connectTimeoutMs: 300 }), { instanceOf: UnreachableError });
  t.true(error.message.startsWith(`cannot connect to Postgres at postgres://postgres:***@127.0.0.1:${port}/hookstream`));
});

test('a URL without a database name is a configuration error', async (t) => {
  const error = await t.throwsAsync(openDatabase('postgres://postgres@127.0.0.1:5432', silentLogger));
  t.true(isHookstreamError(error, ErrorCode.InvalidConfig));
  t.regex(error.message, /DATABASE_URL/);
});

test('dead letters are unique per endpoint and webhook id; api key hashes are unique', async (t) => {
  const em = orm.em.fork();
  const dead = {
    id: `dl_${newIdBody()}`, endpointId: newId(), tenant: 't1', webhookId: `msg_${newIdBody()}`, eventType: 'user.created',
    attempts: 4, lastStatus: 500, lastError: 'HTTP 500', failedAt: new Date(), sealed: Buffer.from([1, 2, 3]),
    sourceStream: 'DELIVERIES_0', sourceSeq: 42, createdAt: new Date(),
  };
  await em.insert(DeadLetter, dead);
  await t.throwsAsync(em.insert(DeadLetter, { ...dead, id: `dl_${newIdBody()}` }));
  const stored = await orm.em.fork().findOneOrFail(DeadLetter, { id: dead.id });
  t.is(stored.deadCount, 1);
  t.is(stored.replayCount, 0);
  t.is(stored.status, 'dead');
  t.deepEqual([...stored.sealed], [1, 2, 3]);

  const hash = randomBytes(32);
  const key = { tenant: 't1', name: null, hash, prefix: 'hs_abcd', createdAt: new Date(), revokedAt: null };
  await em.insert(ApiKey, { ...key, id: `key_${newIdBody()}` });
  await t.throwsAsync(em.insert(ApiKey, { ...key, id: `key_${newIdBody()}` }));
});

test('queries are tenant-scoped: another tenant\'s endpoint is exactly as invisible as a missing one', async (t) => {
  const em = orm.em.fork();
  const mine = record('tenant_iso_a');
  const theirs = record('tenant_iso_b');
  await em.insertMany(EndpointRecord, [mine, theirs]);
  const row = await getEndpoint(orm.em.fork(), 'tenant_iso_a' as TenantId, mine.id as EndpointId);
  const expected = {
    id: mine.id, tenant: 'tenant_iso_a', url: mine.url, events: ['user.*'], description: null, status: 'active',
    signatureScheme: 'v1', signingPublicKey: null, rateLimit: null, ordering: 'none', disabledReason: null, disabledAt: null, createdAt: mine.createdAt.toISOString(), updatedAt: mine.updatedAt.toISOString(), version: 1,
  } as EndpointRow;
  t.deepEqual(row, expected);
  t.is(await getEndpoint(orm.em.fork(), 'tenant_iso_a' as TenantId, theirs.id as EndpointId), undefined);
  t.is(await getEndpoint(orm.em.fork(), 'tenant_iso_a' as TenantId, newId() as EndpointId), undefined);
  const page = await listEndpoints(orm.em.fork(), 'tenant_iso_a' as TenantId, { limit: 10 });
  t.deepEqual(page.rows.map((r) => r.id), [mine.id]);
  t.false(page.hasMore);
  t.is(page.nextCursor, undefined);
  // A cursor taken from another tenant's id reveals nothing of theirs either.
  const other = await listEndpoints(orm.em.fork(), 'tenant_iso_b' as TenantId, { limit: 10, cursor: 'webhook_zzzzzzzzzzzzzzzzzzzzzzzzzz' });
  t.deepEqual(other.rows.map((r) => r.id), [theirs.id]);
});

test('pagination over 250 endpoints with concurrent inserts misses and repeats nothing, newest first', async (t) => {
  const tenant = 'tenant_pages' as TenantId;
  const existing: string[] = [];
  for (let i = 0; i < 250; i++) existing.push(newId());
  await orm.em.fork().insertMany(EndpointRecord, existing.map((id) => record(tenant, id)));
  await orm.em.fork().insertMany(EndpointRecord, Array.from({ length: 30 }, () => record('tenant_pages_other')));

  const seen: string[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await listEndpoints(orm.em.fork(), tenant, { limit: 17, cursor });
    seen.push(...page.rows.map((r) => r.id));
    t.true(page.rows.length <= 17);
    t.true(page.rows.every((r) => r.tenant === tenant));
    // New endpoints (for this tenant and another) arrive between every page.
    await orm.em.fork().insertMany(EndpointRecord, [record(tenant), record(tenant), record('tenant_pages_other')]);
    if (!page.hasMore) {
      t.is(page.nextCursor, undefined);
      break;
    }
    t.is(page.nextCursor, page.rows.at(-1)!.id);
    cursor = page.nextCursor;
  }
  // Strictly newest (largest id) first, so nothing repeats; every endpoint that existed when paging
  // began is there. (Ids minted later sort above the cursor, so in practice none of them appear.)
  t.true(seen.every((id, i) => i === 0 || id < seen[i - 1]!));
  const before = new Set(existing);
  t.deepEqual(seen.filter((id) => before.has(id)), [...existing].sort().reverse());
});

test('list limits are clamped to at least one row', async (t) => {
  const tenant = 'tenant_limit' as TenantId;
  await orm.em.fork().insertMany(EndpointRecord, [record(tenant), record(tenant)]);
  const page = await listEndpoints(orm.em.fork(), tenant, { limit: 0 });
  t.is(page.rows.length, 1);
  t.true(page.hasMore);
});
