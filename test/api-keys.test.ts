// API keys: only hashes are stored, revoked and unknown keys do not authenticate, and the CLI
// (`hookstream api-keys create|list|revoke`) prints a key once and never again.
import test from 'ava';
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { createHash } from 'node:crypto';
import { createTestDatabase, type TestDatabase } from './helpers/database.ts';
import { openDatabase, closeDatabase, type Database } from '../src/db/orm.ts';
import { authenticate, createApiKey, listApiKeys, revokeApiKey } from '../src/apikeys/store.ts';
import { generateKey, isWellFormedKey } from '../src/apikeys/key.ts';
import { silentLogger } from '../src/log.ts';
import type { TenantId } from '../src/domain/ids.ts';

const run = promisify(execFile);
let db: TestDatabase;
let orm: Database;

test.before(async () => {
  db = await createTestDatabase('api_keys');
  orm = await openDatabase(db.url, silentLogger);
});
test.after.always(async () => {
  if (orm) await closeDatabase(orm);
  await db?.drop();
});

const cli = (...args: string[]) =>
  run(process.execPath, ['src/cli/main.ts', ...args], { env: { ...process.env, DATABASE_URL: db.url, HOOKSTREAM_LOG_LEVEL: 'error' } });

test('keys look like hs_live_ + 43 base64url characters and are stored only as their sha256', async (t) => {
  const { key, hash, prefix } = generateKey();
  t.regex(key, /^hs_live_[A-Za-z0-9_-]{43}$/);
  t.true(isWellFormedKey(key));
  t.deepEqual(hash, createHash('sha256').update(key).digest());
  t.is(prefix, key.slice(0, 12));
  t.not(generateKey().key, key);

  const created = await createApiKey(orm.em.fork(), 'tenant_store' as TenantId, 'ci');
  const rows = await orm.em.getConnection().execute<Record<string, unknown>[]>('select * from api_keys where id = ?', [created.id]);
  const stored = JSON.stringify(rows[0], (_k, v: unknown) => (Buffer.isBuffer(v) ? v.toString('hex') : v));
  t.false(stored.includes(created.key), 'the key itself is not stored');
  t.false(stored.includes(created.key.slice(12)), 'nor its secret part');
  t.deepEqual(rows[0]!['hash'], createHash('sha256').update(created.key).digest());
});

test('authenticate: the right tenant for a live key; nothing for malformed, unknown or revoked keys', async (t) => {
  const em = orm.em.fork();
  const a = await createApiKey(em, 'tenant_auth_a' as TenantId);
  const b = await createApiKey(em, 'tenant_auth_b' as TenantId);
  t.deepEqual(await authenticate(em, a.key), { keyId: a.id, tenant: 'tenant_auth_a' as TenantId });
  t.deepEqual(await authenticate(em, b.key), { keyId: b.id, tenant: 'tenant_auth_b' as TenantId });
  for (const presented of ['', 'hs_live_', a.key + 'x', a.key.slice(0, -1), a.key.toUpperCase(), generateKey().key, `hs_test_${a.key.slice(8)}`]) {
    t.is(await authenticate(em, presented), undefined, presented);
  }
  const revoked = await revokeApiKey(em, a.id);
  t.truthy(revoked.revokedAt);
  t.is(await authenticate(em, a.key), undefined);
  // Revoking twice keeps the first revocation time.
  t.is((await revokeApiKey(em, a.id)).revokedAt, revoked.revokedAt);
  await t.throwsAsync(revokeApiKey(em, 'key_00000000000000000000000000'), { message: /not found/ });
  await t.throwsAsync(revokeApiKey(em, 'nonsense'), { message: /not found/ });
  t.truthy(await authenticate(em, b.key), 'other keys are unaffected');
});

test('list shows a tenant\'s keys, revoked ones marked, never the key or its hash', async (t) => {
  const em = orm.em.fork();
  const one = await createApiKey(em, 'tenant_list' as TenantId, 'one');
  const two = await createApiKey(em, 'tenant_list' as TenantId, null);
  await createApiKey(em, 'tenant_list_other' as TenantId, 'other');
  await revokeApiKey(em, one.id);
  const listed = await listApiKeys(em, 'tenant_list' as TenantId);
  t.deepEqual(listed.map((k) => k.id), [one.id, two.id]);
  t.truthy(listed[0]!.revokedAt);
  t.is(listed[1]!.revokedAt, null);
  t.deepEqual(Object.keys(listed[0]!).sort(), ['createdAt', 'id', 'name', 'prefix', 'revokedAt', 'tenant']);
  t.false(JSON.stringify(listed).includes(one.key.slice(12)));
});

test('CLI: api-keys create prints the key once; list never does; revoke makes it useless', async (t) => {
  const created = JSON.parse((await cli('api-keys', 'create', '--tenant', 'tenant_cli', '--name', 'deploy bot', '--json')).stdout) as Record<string, string | null>;
  t.regex(String(created['key']), /^hs_live_/);
  t.regex(String(created['id']), /^key_/);
  t.like(created, { tenant: 'tenant_cli', name: 'deploy bot', revoked_at: null });
  const key = String(created['key']);
  t.truthy(await authenticate(orm.em.fork(), key));

  const human = (await cli('api-keys', 'create', '--tenant', 'tenant_cli')).stdout;
  t.regex(human, /hs_live_[A-Za-z0-9_-]{43}\s+\(shown once\)/);

  const listedJson = (await cli('api-keys', 'list', '--tenant', 'tenant_cli', '--json')).stdout;
  const listed = JSON.parse(listedJson) as Record<string, unknown>[];
  t.is(listed.length, 2);
  t.false(listedJson.includes(key.slice(12)), 'list --json never prints the key');
  t.false(listed.some((k) => 'key' in k || 'hash' in k));
  const listedHuman = (await cli('api-keys', 'list', '--tenant', 'tenant_cli')).stdout;
  t.true(listedHuman.includes(String(created['id'])));
  t.false(listedHuman.includes(key.slice(12)));

  const revoked = JSON.parse((await cli('api-keys', 'revoke', String(created['id']), '--json')).stdout) as Record<string, unknown>;
  t.truthy(revoked['revoked_at']);
  t.is(await authenticate(orm.em.fork(), key), undefined);
});

test('CLI: --help, usage errors and unknown ids', async (t) => {
  for (const command of ['create', 'list', 'revoke']) {
    const { stdout } = await cli('api-keys', command, '--help');
    t.regex(stdout, new RegExp(`^Usage: hookstream api-keys ${command}`));
  }
  const missingTenant = await t.throwsAsync(cli('api-keys', 'create'));
  t.is((missingTenant as { code?: number }).code, 2);
  const badTenant = await t.throwsAsync(cli('api-keys', 'list', '--tenant', 'a.b'));
  t.is((badTenant as { code?: number }).code, 2);
  const unknown = await t.throwsAsync(cli('api-keys', 'revoke', 'key_00000000000000000000000000'));
  t.is((unknown as { code?: number }).code, 1);
  t.regex((unknown as { stderr?: string }).stderr ?? '', /not found/);
});
