// Operators and the audit log (issue 19): operator keys are printed once and kept only as hashes; every
// audited admin action (opening a dead letter or a rejected event's body, replay, bulk replay, retry-now)
// is recorded by the admin role with the name the request carries, whether the CLI or another client
// asks; CLI revokes are recorded by the CLI; `audit list` shows it all.
import test from 'ava';
import { runCli, type CliRun } from './helpers/cli.ts';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { AdminRequestError, connectAsOperator, createAdminClient, type AdminClient } from '../src/admin/client.ts';
import type { AuditEntryOut, DeadLetterOut } from '../src/admin/protocol.ts';
import { authenticateOperator } from '../src/operators/store.ts';
import type { TenantId } from '../src/domain/ids.ts';
import type { NatsConnection } from '@nats-io/nats-core';

let h: TestService;
let nc: NatsConnection;
let alice: AdminClient;
let endpointId = '';
let letters: DeadLetterOut[] = [];


function cli(args: string[], env: Record<string, string> = {}): Promise<CliRun> {
  return runCli(args, { ...process.env, NATS_URL: h.nats.url, DATABASE_URL: h.db.url, HOOKSTREAM_DELIVERY_SHARDS: '2', HOOKSTREAM_OPERATOR: '', ...env });
}

const audit = async (filter: { operator?: string; action?: string; target?: string } = {}): Promise<AuditEntryOut[]> =>
  (await alice.listAudit({ ...filter, limit: 500 })).data;

test.before(async () => {
  h = await startTestService('operators_audit', { HOOKSTREAM_RETRY_SCHEDULE: '200ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '2s' });
  nc = await connectAsOperator({ url: h.nats.url });
  alice = createAdminClient(nc, { operator: 'alice@example.com', timeoutMs: 20_000 });
  const r = await h.receiver(() => 500);
  const { endpoint } = await h.store.create('tenant_audit' as TenantId, { url: r.url, events: ['user.*'] });
  endpointId = endpoint.id;
  for (let i = 0; i < 3; i++) await h.publish('tenant_audit', 'user.created', { userId: `user_${i}` });
  letters = await eventually(async () => {
    const page = await alice.listDeadLetters({ endpoint: endpointId });
    return page.data.length === 3 ? page.data : undefined;
  }, 30_000, 'three dead letters');
  r.respond = () => 200;
});

test.after.always(async () => {
  await nc?.drain();
  await h?.closeAll();
});

test.serial('operators create prints the key once; only its hash is stored; list never shows it; names are not reused', async (t) => {
  const run = await cli(['operators', 'create', '--name', 'carol', '--json']);
  t.is(run.code, 0, run.stderr);
  const created = JSON.parse(run.stdout) as { id: string; name: string; key: string };
  t.regex(created.key, /^hs_op_[A-Za-z0-9_-]{43}$/);
  t.is(created.name, 'carol');
  const stored = await h.service.orm!.em.fork().execute<{ hash: Buffer; prefix: string }[]>('select * from operators where id = ?', [created.id]);
  t.is(stored.length, 1);
  t.false(JSON.stringify(stored).includes(created.key.slice(10)), 'the key is not stored, only its sha256');
  t.is(stored[0]!.hash.length, 32);
  t.like(await authenticateOperator(h.service.orm!.em.fork(), created.key), { name: 'carol' });

  const list = await cli(['operators', 'list']);
  t.is(list.code, 0, list.stderr);
  t.regex(list.stdout, /carol/);
  t.false(list.stdout.includes(created.key.slice(10)));

  const again = await cli(['operators', 'create', '--name', 'carol']);
  t.is(again.code, 1);
  t.regex(again.stderr, /carol exists/);
  const bad = await cli(['operators', 'create', '--name', '<script>']);
  t.is(bad.code, 2, 'a name outside the rule is a usage error');

  const revoke = await cli(['operators', 'revoke', 'carol', '--operator', 'root-admin']);
  t.is(revoke.code, 0, revoke.stderr);
  t.is(await authenticateOperator(h.service.orm!.em.fork(), created.key), undefined, 'a revoked key no longer signs in');
  t.like((await audit({ action: 'operator.revoke', target: created.id }))[0], { operator: 'root-admin', outcome: 'ok' });
  t.like((await audit({ action: 'operator.create', target: created.id }))[0], { operator: 'cli:' + (await import('node:os')).userInfo().username, outcome: 'ok' });
});

test.serial('opening a dead letter, replaying one and a bulk replay are audited with the operator, the time and the target', async (t) => {
  const before = Date.now();
  await alice.showDeadLetter({ id: letters[0]!.id });
  await alice.replayDeadLetter({ id: letters[0]!.id });
  const bulk = await alice.replayDeadLetters({ endpoint: endpointId });
  t.is(bulk.replayed.length, 2);
  const entries = await audit({ operator: 'alice@example.com' });
  t.deepEqual(entries.map((e) => [e.action, e.target, e.outcome]), [
    ['dead_letters.replay_many', `endpoint=${endpointId}`, 'ok'],
    ['dead_letter.replay', letters[0]!.id, 'ok'],
    ['dead_letter.show', letters[0]!.id, 'ok'],
  ], 'newest first');
  t.regex(entries[0]!.detail!, /replayed 2, failed 0 \(of 2 matching\)/);
  t.regex(entries[1]!.detail!, new RegExp(`replay 1 of ${letters[0]!.webhook_id}`));
  for (const e of entries) t.true(Date.parse(e.at) >= before - 1000 && Date.parse(e.at) <= Date.now() + 1000);
});

test.serial('refused actions are audited with their code; a request that does not parse is not; a malformed name is refused', async (t) => {
  const missing = 'dl_00000000000000000000000000';
  await t.throwsAsync(alice.showDeadLetter({ id: missing }), { instanceOf: AdminRequestError });
  t.like((await audit({ target: missing }))[0], { action: 'dead_letter.show', outcome: 'not_found', operator: 'alice@example.com' });
  const conflict = await alice.replayDeadLetter({ id: letters[0]!.id }).catch((e: unknown) => e);
  t.true(conflict instanceof AdminRequestError && conflict.code === 'conflict');
  t.like((await audit({ action: 'dead_letter.replay', target: letters[0]!.id }))[0], { outcome: 'conflict' });

  const count = (await audit()).length;
  await t.throwsAsync(alice.showDeadLetter({ id: 'nonsense' }), { instanceOf: AdminRequestError });
  t.is((await audit()).length, count, 'no target, nothing done, nothing recorded');

  const forged = createAdminClient(nc, { operator: 'eve <admin>' });
  const refused = await forged.showDeadLetter({ id: letters[1]!.id }).catch((e: unknown) => e);
  t.true(refused instanceof AdminRequestError && refused.code === 'bad_request', 'a name outside the rule is refused before anything is opened');
  t.is((await audit()).length, count);

  const unnamed = createAdminClient(nc);
  await unnamed.showDeadLetter({ id: letters[1]!.id });
  t.like((await audit())[0], { operator: 'unnamed', action: 'dead_letter.show', target: letters[1]!.id });
});

test.serial('retry-now and opening a rejected event body are audited', async (t) => {
  await alice.retryNow({ endpoint: endpointId });
  t.like((await audit())[0], { action: 'endpoint.retry_now', target: endpointId, outcome: 'ok', operator: 'alice@example.com' });
  await h.publishRaw('tenant_audit', 'user.created', 'not json');
  const rejected = await eventually(async () => (await alice.listRejectedEvents({ tenant: 'tenant_audit' })).data[0], 20_000, 'a rejected event');
  await alice.showRejectedEvent({ seq: rejected.seq });
  t.like((await audit())[0], { action: 'rejected_event.show', target: String(rejected.seq), outcome: 'ok' });
});

test.serial('the CLI audits as --operator, else HOOKSTREAM_OPERATOR; audit list shows the log', async (t) => {
  const byOption = await cli(['dead-letters', 'show', letters[2]!.id, '--operator', 'bob'], { HOOKSTREAM_OPERATOR: 'dave' });
  t.is(byOption.code, 0, byOption.stderr);
  t.like((await audit())[0], { operator: 'bob', action: 'dead_letter.show', target: letters[2]!.id });
  const byEnv = await cli(['endpoints', 'retry-now', endpointId], { HOOKSTREAM_OPERATOR: 'dave' });
  t.is(byEnv.code, 0, byEnv.stderr);
  t.like((await audit())[0], { operator: 'dave', action: 'endpoint.retry_now' });
  const badName = await cli(['endpoints', 'retry-now', endpointId], { HOOKSTREAM_OPERATOR: 'has space' });
  t.is(badName.code, 2);

  const list = await cli(['audit', 'list', '--by', 'bob']);
  t.is(list.code, 0, list.stderr);
  const lines = list.stdout.trim().split('\n');
  t.regex(lines[0]!, /^AT\s+OPERATOR\s+ACTION\s+TARGET\s+OUTCOME\s+DETAIL$/);
  t.is(lines.length, 2);
  t.regex(lines[1]!, new RegExp(`bob\\s+dead_letter\\.show\\s+${letters[2]!.id}\\s+ok`));
  const json = JSON.parse((await cli(['audit', 'list', '--action', 'endpoint.retry_now', '--json'])).stdout) as { data: AuditEntryOut[] };
  t.deepEqual(json.data.map((e) => e.operator), ['dave', 'alice@example.com']);
  const wrong = await cli(['audit', 'list', '--action', 'everything']);
  t.is(wrong.code, 1);
  t.regex(wrong.stderr, /action must be one of/);
});
