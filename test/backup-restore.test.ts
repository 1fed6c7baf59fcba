// `hookstream backup` and `hookstream restore` as an operator runs them (bin/hookstream): a running
// service is backed up, its NATS store and database are thrown away, a service with the same keys starts
// on new, empty ones, the backup is restored into it, and then the same API key manages the same
// endpoints, which receive webhooks signed with their old secrets, and the dead letter opens and replays.
import test from 'ava';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { apiClient } from './helpers/api-client.ts';
import { createApiKey } from '../src/apikeys/store.ts';
import type { TenantId } from '../src/domain/ids.ts';
import type { Receiver } from './helpers/receiver.ts';
import { runCli } from './helpers/cli.ts';

const dir = mkdtempSync(join(tmpdir(), 'hookstream-backup-'));
const services: TestService[] = [];
test.after.always(async () => {
  for (const s of services) await s.closeAll().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
});

const env = { HOOKSTREAM_RETRY_SCHEDULE: '300ms,300ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '2s' };
const cliEnv = (h: TestService) => ({
  PATH: process.env['PATH'], NATS_URL: h.nats.url, DATABASE_URL: h.db.url,
  HOOKSTREAM_DELIVERY_SHARDS: h.config.deliveryShards.toString(), HOOKSTREAM_DATA_DIR: join(dir, 'data'), HOOKSTREAM_LOG_LEVEL: 'error',
});

const verify = (secret: string, r: Receiver['received'][number]) => (new Webhook(secret).verify(r.body, {
  'webhook-id': String(r.headers['webhook-id']),
  'webhook-timestamp': String(r.headers['webhook-timestamp']),
  'webhook-signature': String(r.headers['webhook-signature']),
}) as { data: { userId: string } }).data;

test('a backup restored onto empty servers brings back the API key, the endpoints with their secrets, and the dead letters', async (t) => {
  t.timeout(240_000);
  // The service as it was: an API key, two endpoints, one delivery done and one dead.
  const before = await startTestService('backup_before', env);
  services.push(before);
  let failing = true;
  const good = await before.receiver(() => 200);
  const bad = await before.receiver(() => (failing ? 500 : 200));
  const { key } = await createApiKey(before.service.orm!.em.fork(), 'tenant_backup' as TenantId, 'backup test');
  const api = apiClient(before.service.api!.url, key, t);
  const created = await Promise.all([good, bad].map(async (r) => {
    const res = await api.post('/v1/webhooks', { url: r.url, events: ['user.*'] });
    t.is(res.status, 201);
    return res.body as { id: string; signing_secret: string };
  }));
  const [kept, dying] = created as [{ id: string; signing_secret: string }, { id: string; signing_secret: string }];
  await before.publish('tenant_backup', 'user.created', { userId: 'user_1' });
  t.is(verify(kept.signing_secret, (await good.waitFor(1))[0]!).userId, 'user_1');
  const beforeAdmin = (await before.operator({ timeoutMs: 20_000 })).admin;
  const [letter] = await eventually(async () => {
    const page = await beforeAdmin.listDeadLetters({ endpoint: dying.id });
    return page.data.length > 0 ? page.data : undefined;
  }, 60_000, 'the dead letter');

  // A table added by a later migration, with generated ids: backed up and restored like the others.
  const probe = 'create table backup_probe (id bigint generated always as identity primary key, note text not null, at timestamptz not null, raw bytea)';
  await before.service.orm!.em.fork().execute(probe);
  await before.service.orm!.em.fork().execute("insert into backup_probe (note, at, raw) values ('one', now(), '\\x00ff'), ('two', now(), null)");

  const backupDir = join(dir, 'backup');
  const backedUp = await runCli(['backup', '--to', backupDir, '--json'], cliEnv(before));
  t.is(backedUp.code, 0, backedUp.stderr);
  const manifest = JSON.parse(backedUp.stdout) as { streams: Record<string, number>; tables: Record<string, number> };
  t.true(manifest.streams['ENDPOINTS']! >= 2);
  t.like(manifest.tables, { api_keys: 1, dead_letters: 1 });
  t.false('endpoints' in manifest.tables, 'the projection is rebuilt, not restored');
  t.deepEqual(JSON.parse(readFileSync(join(backupDir, 'manifest.json'), 'utf8')).tables, manifest.tables);
  // A second backup into the same folder would mix two; it is refused.
  t.is((await runCli(['backup', '--to', backupDir], cliEnv(before))).code, 2);

  // The servers are lost; the service starts again with the same keys on new, empty ones.
  const keys = {
    HOOKSTREAM_MASTER_KEY: before.keys.masterKey,
    HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: before.keys.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: before.keys.deadLetterSecretKey,
  };
  await before.closeAll();
  services.splice(0);
  const after = await startTestService('backup_after', { ...env, ...keys });
  services.push(after);
  await after.service.orm!.em.fork().execute(probe);
  const restored = await runCli(['restore', '--from', backupDir], cliEnv(after));
  t.is(restored.code, 0, restored.stderr);
  t.regex(restored.stdout, /stream ENDPOINTS: \d+ message/);
  // Restoring twice would duplicate every endpoint's history: refused, nothing written.
  const again = await runCli(['restore', '--from', backupDir], cliEnv(after));
  t.is(again.code, 1);
  t.regex(again.stderr, /ENDPOINTS stream already holds \d+ message\(s\): restore onto an empty NATS store/);

  const sql = after.service.orm!.em.fork();
  await sql.execute("insert into backup_probe (note, at) values ('three', now())");
  t.deepEqual((await sql.execute<{ id: string; note: string; raw: string | null }[]>("select id::text, note, encode(raw, 'hex') as raw from backup_probe order by id"))
    .map((r) => `${r.id} ${r.note} ${r.raw}`), ['1 one 00ff', '2 two null', '3 three null']);

  // The same API key reads the same endpoints.
  const sameKey = apiClient(after.service.api!.url, key, t);
  const listed = await eventually(async () => {
    const res = await sameKey.get('/v1/webhooks');
    return res.status === 200 && (res.body as { data: unknown[] }).data.length === 2 ? res.body as { data: { id: string }[] } : undefined;
  }, 30_000, 'the endpoints through the API');
  t.deepEqual(listed.data.map((e) => e.id).sort(), [kept.id, dying.id].sort());

  // Deliveries go out signed with the secrets they had.
  const goodAfter = await after.receiver(() => 200);
  const updated = await sameKey.request('PATCH', `/v1/webhooks/${kept.id}`, { json: { url: goodAfter.url } });
  t.is(updated.status, 200);
  await after.publish('tenant_backup', 'user.updated', { userId: 'user_2' });
  const got = await eventually(() => goodAfter.received.find((r) => r.body.includes('user_2')), 60_000, 'the delivery after the restore');
  t.is(verify(kept.signing_secret, got).userId, 'user_2');

  // The dead letter opens and replays to its endpoint, signed with that endpoint's old secret.
  const admin = (await after.operator({ timeoutMs: 20_000 })).admin;
  const shown = await admin.showDeadLetter({ id: letter!.id });
  t.is(shown.dead_letter.webhook_id, letter!.webhook_id);
  t.is(shown.tag, 'current');
  const badAfter = await after.receiver(() => 200);
  t.is((await sameKey.request('PATCH', `/v1/webhooks/${dying.id}`, { json: { url: badAfter.url } })).status, 200);
  failing = false;
  await admin.replayDeadLetter({ id: letter!.id });
  const replayed = await eventually(() => badAfter.received.find((r) => r.headers['webhook-id'] === letter!.webhook_id), 60_000, 'the replay');
  t.is(verify(dying.signing_secret, replayed).userId, 'user_1');
});
