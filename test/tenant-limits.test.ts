// Per-tenant quotas (src/tenants/limits.ts) against a real Postgres: defaults, overrides per tenant and
// of the defaults, back to the default with null, the audit row, the copy in memory following a set
// made elsewhere (another process) once it is reloaded, `hookstream tenants limits set|show`, and the
// read-only copy of a router or delivery process over a plain pg pool.
import test from 'ava';
import { createTestDatabase, type TestDatabase } from './helpers/database.ts';
import { openDatabase, closeDatabase, type Database } from '../src/db/orm.ts';
import { createTenantLimitsReader, createTenantLimitsStore, DEFAULT_TENANT_LIMITS, DEFAULTS_TENANT } from '../src/tenants/limits.ts';
import pg from 'pg';
import type { TenantId } from '../src/domain/ids.ts';
import { createLogger, silentLogger } from '../src/log.ts';
import { runCli } from './helpers/cli.ts';

let db: TestDatabase;
let orm: Database;

test.before(async () => {
  db = await createTestDatabase('tenant_limits');
  orm = await openDatabase(db.url, silentLogger);
});

test.after.always(async () => {
  if (orm) await closeDatabase(orm).catch(() => {});
  await db?.drop().catch(() => {});
});

const A = 'acme' as TenantId;
const B = 'globex' as TenantId;

test('defaults, a tenant override, a defaults override, and back to the default', async (t) => {
  const store = createTenantLimitsStore(orm);
  t.deepEqual(await store.get(A), DEFAULT_TENANT_LIMITS);

  t.deepEqual(await store.set(A, { endpoints: 3 }, 'ops-alice'), { ...DEFAULT_TENANT_LIMITS, endpoints: 3 });
  t.is((await store.get(B)).endpoints, DEFAULT_TENANT_LIMITS.endpoints, 'another tenant keeps the default');

  await store.set(DEFAULTS_TENANT, { writesPerSecond: 7, endpoints: 50 }, 'ops-alice');
  t.deepEqual(await store.get(B), { ...DEFAULT_TENANT_LIMITS, writesPerSecond: 7, endpoints: 50 });
  t.deepEqual(await store.get(A), { ...DEFAULT_TENANT_LIMITS, writesPerSecond: 7, endpoints: 3 }, "a tenant's own override beats the defaults row");

  await store.set(A, { endpoints: null }, 'ops-bob');
  t.is((await store.get(A)).endpoints, 50);

  const list = await store.list();
  t.is(list[0]!.tenant, DEFAULTS_TENANT, 'the defaults row first');
  const a = list.find((o) => o.tenant === A);
  t.deepEqual(a?.limits, {});
  t.is(a?.updatedBy, 'ops-bob');

  const audit = await orm.em.fork().execute<{ operator: string; target: string; detail: string }[]>(
    "select operator, target, detail from audit_log where action = 'tenant.limits_set' and target in ('acme', '*') order by id");
  t.deepEqual(audit.map((a) => [a.operator, a.target, a.detail]), [
    ['ops-alice', A, 'endpoints=3'],
    ['ops-alice', DEFAULTS_TENANT, 'endpoints=50 writes_per_second=7'],
    ['ops-bob', A, 'endpoints=default'],
  ]);
});

test('bad values are refused and change nothing', async (t) => {
  const D = 'umbrella' as TenantId;
  const store = createTenantLimitsStore(orm);
  await t.throwsAsync(store.set(D, { queuedDeliveries: -1 }, 'ops'), { message: /queued_deliveries must be an integer/ });
  await t.throwsAsync(store.set(D, { eventsPerSecond: 1.5 }, 'ops'), { message: /events_per_second/ });
  await t.throwsAsync(store.set(D, {}, 'ops'), { message: /no limit/ });
  t.false((await store.list()).some((o) => o.tenant === D));
});

test('the copy in memory follows a change made by another process once reloaded', async (t) => {
  const C = 'initech' as TenantId;
  let clock = 0;
  const reader = createTenantLimitsStore(orm, { refreshMs: 1000, now: () => clock });
  const writer = createTenantLimitsStore(orm);
  const before = (await reader.get(C)).eventsPerSecond;
  await writer.set(C, { eventsPerSecond: before + 1 }, 'ops');
  t.is(reader.current(C).eventsPerSecond, before, 'not reloaded yet: the copy answers, without a query');
  clock += 1000;
  t.is((await reader.get(C)).eventsPerSecond, before, 'stale: the copy answers at once, and a reload starts');
  await reader.refresh();
  t.is((await reader.get(C)).eventsPerSecond, before + 1);
  // A copy a minute old is reloaded before it answers.
  await writer.set(C, { eventsPerSecond: before + 2 }, 'ops');
  clock += 60_000;
  t.is((await reader.get(C)).eventsPerSecond, before + 2);
});

test('hookstream tenants limits set|show: overrides, back to the default, refused input, audited under the operator', async (t) => {
  const env = { ...process.env, DATABASE_URL: db.url, HOOKSTREAM_OPERATOR: 'ops-carol' };
  const set = await runCli(['tenants', 'limits', 'set', '--tenant', 'hooli', '--endpoints', '7', '--events-per-second', '50', '--json'], env);
  t.is(set.code, 0, set.stderr);
  t.like(JSON.parse(set.stdout), { tenant: 'hooli', limits: { endpoints: 7, events_per_second: 50 } });
  const show = await runCli(['tenants', 'limits', 'show', '--tenant', 'hooli'], env);
  t.is(show.code, 0, show.stderr);
  t.regex(show.stdout, /endpoints\s+7/);
  t.regex(show.stdout, /hooli\s+endpoints=7 events_per_second=50/);
  t.is((await runCli(['tenants', 'limits', 'set', '--tenant', 'hooli', '--endpoints', 'default'], env)).code, 0);
  const store = createTenantLimitsStore(orm);
  t.is((await store.get('hooli' as TenantId)).endpoints, (await store.get('nobody' as TenantId)).endpoints, 'the default again');

  for (const args of [['--tenant', 'hooli', '--endpoints', '-1'], ['--tenant', 'hooli'], ['--tenant', 'bad tenant', '--endpoints', '1'], ['--endpoints', '1']]) {
    const r = await runCli(['tenants', 'limits', 'set', ...args], env);
    t.is(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
  }
  const audit = await orm.em.fork().execute<{ operator: string; detail: string }[]>(
    "select operator, detail from audit_log where action = 'tenant.limits_set' and target = 'hooli' order by id");
  t.deepEqual(audit.map((a) => [a.operator, a.detail]), [['ops-carol', 'endpoints=7 events_per_second=50'], ['ops-carol', 'endpoints=default']]);
});

test('a router or delivery process reads the overrides over a plain pool, and the defaults while Postgres does not answer', async (t) => {
  const C = 'stark' as TenantId; // its own tenant: the tests of this file run at once
  await createTenantLimitsStore(orm).set(C, { eventsPerSecond: 12 }, 'ops-alice');
  const pool = new pg.Pool({ connectionString: db.url, max: 1 });
  t.teardown(() => pool.end());
  const reader = createTenantLimitsReader((sql) => pool.query(sql));
  t.is((await reader.get(C)).eventsPerSecond, 12);
  t.is(reader.current('other' as TenantId).eventsPerSecond, DEFAULT_TENANT_LIMITS.eventsPerSecond);

  // Nothing listens there: the defaults, without an exception, and a warning rather than a crash.
  const away = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/none', max: 1, connectionTimeoutMillis: 500 });
  t.teardown(() => away.end());
  const lines: string[] = [];
  const unread = createTenantLimitsReader((sql) => away.query(sql), { log: createLogger({ write: (l) => void lines.push(l) }) });
  t.deepEqual(await unread.get(C), DEFAULT_TENANT_LIMITS);
  t.is(lines.length, 1);
  t.regex(lines[0]!, /tenant limits not reloaded; using the last known/);
});
