// Key rotation end to end, against real NATS, Postgres and HTTP receivers, with the commands run as an
// operator runs them (bin/hookstream): the master key (signing secrets, v1a keys, webhook ids) and the
// dead-letter key pair each move to a new key with no lost secret and no delivery that fails to verify,
// and no command output or log line shows a secret or a key.
import test from 'ava';
import { runCli, type CliRun } from './helpers/cli.ts';
import sodium from 'libsodium-wrappers';
import { Webhook } from 'standardwebhooks';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import type { AdminClient } from '../src/admin/client.ts';
import { generateKeys, openDeadLetter, SecretSealer, DecryptionError } from '../src/crypto/sodium.ts';
import { readEndpoint } from '../src/endpoints/read.ts';
import { createEndpoints } from '../src/endpoints/index.ts';
import { verifySignature, verifySignatureV1a } from '../src/domain/signature.ts';
import { applyEndpointEvent, isEndpointEvent } from '../src/domain/endpoint.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';
import { ENDPOINTS_STREAM, endpointSubject } from '../streams/endpoints.ts';
import { startNatsServer } from './helpers/nats-server.ts';
import { connect } from '@nats-io/transport-node';
import { jetstreamManager } from '@nats-io/jetstream';

const TENANT = 'tenant_rot' as TenantId;

let h: TestService;
let admin: AdminClient;
const logLines: string[] = [];
/** Everything that must never appear in output or logs: keys and plaintext secrets. */
const secrets: string[] = [];

// Key sets: the harness's own (K1/P1) and the ones rotated to.
let k1: ReturnType<typeof generateKeys>;
const k2 = { master: '', deadLetter: { publicKey: '', secretKey: '' } };


function cli(args: string[], env: Record<string, string>): Promise<CliRun> {
  const base: Record<string, string | undefined> = { ...process.env };
  for (const name of Object.keys(base)) if (name.startsWith('HOOKSTREAM_')) delete base[name];
  return runCli(args, { ...base, NATS_URL: h.nats.url, DATABASE_URL: h.db.url, HOOKSTREAM_DELIVERY_SHARDS: '2', HOOKSTREAM_RETRY_SCHEDULE: '300ms,600ms', ...env });
}

function assertNoSecrets(t: { false(v: boolean, m?: string): void }, text: string, where: string): void {
  for (const s of secrets) t.false(text.includes(s), `${where} shows a secret or key`);
}

const receiver = (answer: () => number = () => 204) => h.receiver(() => answer());

const publish = (type: string, data: unknown) => h.publish(TENANT, type, data);

type Got = Receiver['received'][number];
const parts = (g: Got) => ({ id: String(g.headers['webhook-id']), ts: Number(g.headers['webhook-timestamp']), sig: String(g.headers['webhook-signature']) });
const verifiesWith = (secret: string, g: Got) => verifySignature(secret, parts(g).sig, parts(g).id, parts(g).ts, g.body);

/** The next delivery to `r` after publishing one event to every endpoint of the tenant. */
async function deliverOne(rs: Receiver[]): Promise<Got[]> {
  const before = rs.map((r) => r.received.length);
  await publish('user.updated', { userId: 'user_1' });
  return Promise.all(rs.map(async (r, i) => (await r.waitFor(before[i]! + 1, 20_000))[before[i]!]!));
}

// Endpoints of the master-key rotation.
let v1: { id: EndpointId; secret: string; r: Receiver };
let rotated: { id: EndpointId; oldSecret: string; newSecret: string; r: Receiver };
let v1a: { id: EndpointId; publicKey: string; r: Receiver };
let firstWebhookId = '';

test.before(async () => {
  await sodium.ready;
  h = await startTestService('key_rotation', { HOOKSTREAM_RETRY_SCHEDULE: '300ms,600ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '2s', HOOKSTREAM_LOG_LEVEL: 'info' }, {
    logWrite: (l) => logLines.push(l),
  });
  k1 = h.keys;
  const fresh = generateKeys();
  k2.master = fresh.masterKey;
  k2.deadLetter = { publicKey: fresh.deadLetterPublicKey, secretKey: fresh.deadLetterSecretKey };
  secrets.push(k1.masterKey, k1.deadLetterSecretKey, k2.master, k2.deadLetter.secretKey);
  ({ admin } = await h.operator({ timeoutMs: 20_000 }));
});

test.after.always(() => h?.closeAll());

test.serial('master key: endpoints sealed under K1 keep verifying through K2 + previous K1, reseal, and K2 alone', async (t) => {
  // Under K1: a v1 endpoint, one rotated with a grace period (two sealed secrets), and a v1a endpoint.
  const r1 = await receiver();
  const a = await h.store.create(TENANT, { url: r1.url, events: ['user.*'] });
  v1 = { id: a.endpoint.id, secret: a.signingSecret!, r: r1 };
  const r2 = await receiver();
  const b = await h.store.create(TENANT, { url: r2.url, events: ['user.*'] });
  const bRotated = await h.store.rotateSecret(TENANT, b.endpoint.id, 3600_000);
  rotated = { id: b.endpoint.id, oldSecret: b.signingSecret!, newSecret: bRotated.signingSecret!, r: r2 };
  const r3 = await receiver();
  const c = await h.store.create(TENANT, { url: r3.url, events: ['user.*'], signature_scheme: 'v1a' });
  v1a = { id: c.endpoint.id, publicKey: c.endpoint.signingPublicKey!, r: r3 };
  secrets.push(v1.secret, rotated.oldSecret, rotated.newSecret);

  const check = (got: Got[], phase: string) => {
    // verify returns the parsed body (always truthy) or throws: the check is that it does not throw.
    t.notThrows(() => new Webhook(v1.secret).verify(got[0]!.body, { 'webhook-id': parts(got[0]!).id, 'webhook-timestamp': String(parts(got[0]!).ts), 'webhook-signature': parts(got[0]!).sig }), phase);
    t.true(verifiesWith(rotated.newSecret, got[1]!), `${phase}: new secret of the rotated endpoint`);
    t.true(verifiesWith(rotated.oldSecret, got[1]!), `${phase}: old secret, still in its grace period`);
    t.true(verifySignatureV1a(v1a.publicKey, parts(got[2]!).sig, parts(got[2]!).id, parts(got[2]!).ts, got[2]!.body), `${phase}: v1a`);
  };
  const all = () => [v1.r, rotated.r, v1a.r];

  const first = await deliverOne(all());
  check(first, 'under K1');
  firstWebhookId = parts(first[0]!).id;

  // Every process on K2 with K1 as the previous key: what K1 sealed still opens, new ids are made under K2.
  await h.restart({ HOOKSTREAM_MASTER_KEY: k2.master, HOOKSTREAM_PREVIOUS_MASTER_KEY: k1.masterKey });
  check(await deliverOne(all()), 'K2 + previous K1');
  // The admin role still finds the event of a webhook id made under K1.
  t.is((await admin.showDelivery({ webhook_id: firstWebhookId, endpoint: v1.id })).state, 'acknowledged');

  const env = { HOOKSTREAM_MASTER_KEY: k2.master, HOOKSTREAM_PREVIOUS_MASTER_KEY: k1.masterKey };
  const run = await cli(['keys', 'reseal-secrets', '--json'], env);
  t.is(run.code, 0, run.stderr);
  t.like(JSON.parse(run.stdout), { resealed: 3, already_current: 0, failed: 0 });
  assertNoSecrets(t, run.stdout + run.stderr, 'reseal-secrets');
  const human = await cli(['keys', 'reseal-secrets'], env);
  t.is(human.code, 0, human.stderr);
  t.is(human.stdout.trim(), 'endpoints: 0 resealed, 3 already current, 0 failed', 'a second run finds nothing to do');

  // The stream now ends with the resealed event: v2 values under K2 only, bound to the endpoint, the same secrets.
  const last = await h.service.jsm.streams.getMessage(ENDPOINTS_STREAM, { last_by_subj: endpointSubject(rotated.id) });
  const event = last!.json<{ type: string; secrets: { sealed: string; expires_at: string | null }[] }>();
  t.is(event.type, 'endpoint.secrets_resealed');
  t.is(event.secrets.length, 2);
  t.is(event.secrets[0]!.expires_at, null);
  t.truthy(event.secrets[1]!.expires_at, 'the grace period is kept');
  const onlyK2 = new SecretSealer(k2.master);
  t.deepEqual(event.secrets.map((s) => s.sealed.slice(0, 3)), ['v2:', 'v2:']);
  t.deepEqual(event.secrets.map((s) => onlyK2.open(s.sealed, rotated.id)), [rotated.newSecret, rotated.oldSecret]);
  t.throws(() => new SecretSealer(k1.masterKey).open(event.secrets[0]!.sealed, rotated.id), { instanceOf: DecryptionError });
  // Nothing a tenant sees changed but the version; the projection follows, with no secret in Postgres.
  const state = await readEndpoint(h.service.js, h.service.jsm, rotated.id);
  t.is(state!.version, last!.seq);
  const rows = await eventually(async () => {
    const found = await h.service.orm!.em.fork().execute<Record<string, unknown>[]>('select * from endpoints where id = ?', [rotated.id]);
    return Number(found[0]?.['version']) === last!.seq ? found : undefined;
  }, 10_000, 'the projection to apply the resealed event');
  assertNoSecrets(t, JSON.stringify(rows), 'the endpoints row');
  t.false(JSON.stringify(rows).includes('v2:'), 'no sealed value in Postgres either');

  // K1 removed everywhere: every endpoint still verifies.
  await h.restart({ HOOKSTREAM_MASTER_KEY: k2.master });
  check(await deliverOne(all()), 'K2 alone');
  const again = await cli(['keys', 'reseal-secrets'], { HOOKSTREAM_MASTER_KEY: k2.master });
  t.is(again.stdout.trim(), 'endpoints: 0 resealed, 3 already current, 0 failed');
  t.regex(again.stderr, /HOOKSTREAM_PREVIOUS_MASTER_KEY is not set/);
});

test.serial('master key: a value in the pre-binding format is upgraded to v2 bound to its endpoint', async (t) => {
  const r = await receiver();
  const secret = 'whsec_' + Buffer.alloc(32, 9).toString('base64');
  secrets.push(secret);
  // As written before issue 8: base64(nonce || secretbox) under the (now current) master key, no prefix.
  const nonce = sodium.randombytes_buf(24);
  const legacy = Buffer.concat([nonce, sodium.crypto_secretbox_easy(sodium.from_string(secret), nonce, Buffer.from(k2.master, 'base64'))]).toString('base64');
  const id = 'webhook_0legacyrot0000a' as EndpointId;
  await h.service.js.publish(endpointSubject(id), JSON.stringify({
    v: 1, type: 'endpoint.created', id, tenant: TENANT, url: r.url, events: ['user.*'], description: null, secret: legacy, at: new Date().toISOString(),
  }), { expect: { lastSubjectSequence: 0 } });
  const [before] = await deliverOne([r]);
  t.true(verifiesWith(secret, before!), 'the legacy value signs');

  const run = await cli(['keys', 'reseal-secrets', '--json'], { HOOKSTREAM_MASTER_KEY: k2.master });
  t.is(run.code, 0, run.stderr);
  t.like(JSON.parse(run.stdout), { resealed: 1, already_current: 3, failed: 0 });
  assertNoSecrets(t, run.stdout + run.stderr, 'reseal-secrets');
  const state = await readEndpoint(h.service.js, h.service.jsm, id);
  t.is(state!.secrets.length, 1);
  t.true(state!.secrets[0]!.sealed.startsWith('v2:'));
  t.is(new SecretSealer(k2.master).open(state!.secrets[0]!.sealed, id), secret);
  t.throws(() => new SecretSealer(k2.master).open(state!.secrets[0]!.sealed, v1.id), { instanceOf: DecryptionError }, 'now bound to its endpoint');
  const [after] = await deliverOne([r]);
  t.true(verifiesWith(secret, after!), 'the upgraded value signs with the same secret');
});

test.serial('master key: a secret that opens under no given key is reported by id, never shown, and changes nothing', async (t) => {
  const r = await receiver();
  const other = generateKeys().masterKey;
  secrets.push(other);
  const created = await h.store.create(TENANT, { url: r.url, events: ['organization.*'] });
  // h.store seals under the harness's K1, which is no longer given to anything.
  secrets.push(created.signingSecret!);
  const run = await cli(['keys', 'reseal-secrets'], { HOOKSTREAM_MASTER_KEY: k2.master, HOOKSTREAM_PREVIOUS_MASTER_KEY: other });
  t.is(run.code, 1);
  t.regex(run.stdout, /^endpoints: 0 resealed, 4 already current, 1 failed/);
  t.regex(run.stdout, new RegExp(`${created.endpoint.id}\\s+sealed secret does not open for this endpoint under HOOKSTREAM_MASTER_KEY or HOOKSTREAM_PREVIOUS_MASTER_KEY`));
  t.regex(run.stderr, /1 endpoints not resealed/);
  assertNoSecrets(t, run.stdout + run.stderr, 'reseal-secrets');
  const state = await readEndpoint(h.service.js, h.service.jsm, created.endpoint.id);
  t.is(state!.version, created.seq, 'no event appended');
  // With K1 back as the previous key, it moves.
  const fixed = await cli(['keys', 'reseal-secrets', '--json'], { HOOKSTREAM_MASTER_KEY: k2.master, HOOKSTREAM_PREVIOUS_MASTER_KEY: k1.masterKey });
  t.like(JSON.parse(fixed.stdout), { resealed: 1, failed: 0 });
});

test.serial('dead-letter key pair: P1 dead letters open under P2 + previous P1, are resealed, and replay under P2 alone', async (t) => {
  let healthy = false;
  const r = await receiver(() => (healthy ? 204 : 500));
  // Sealed under K2, as the API now seals (h.store still seals under the harness's K1).
  const { store } = createEndpoints({ js: h.service.js, jsm: h.service.jsm, masterKey: k2.master, allowPrivateTargets: true });
  const created = await store.create(TENANT, { url: r.url, events: ['organization.created'] });
  secrets.push(created.signingSecret!);
  await publish('organization.created', { organizationId: 'org_p1' });
  const [underP1] = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint: created.endpoint.id });
    return page.data.length === 1 ? page.data : undefined;
  }, 30_000, 'a dead letter sealed to P1');
  const sealedOf = async (id: string) =>
    new Uint8Array((await h.service.orm!.em.fork().execute<{ sealed: Buffer }[]>('select sealed from dead_letters where id = ?', [id]))[0]!.sealed);
  const sealedP1 = await sealedOf(underP1!.id);
  // openDeadLetter returns the plaintext bytes (always truthy) or throws: the check is that it opens.
  t.notThrows(() => openDeadLetter(k1.deadLetterPublicKey, k1.deadLetterSecretKey, sealedP1), 'sealed to P1');

  // Admin on P2 with P1 as the previous secret key; the workers seal to P2 from now on.
  const master = { HOOKSTREAM_MASTER_KEY: k2.master };
  const p2 = { HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: k2.deadLetter.publicKey, HOOKSTREAM_DEAD_LETTER_SECRET_KEY: k2.deadLetter.secretKey };
  await h.restart({ ...master, ...p2, HOOKSTREAM_PREVIOUS_DEAD_LETTER_SECRET_KEY: k1.deadLetterSecretKey });
  const shown = await admin.showDeadLetter({ id: underP1!.id });
  t.like(shown.message.body, { type: 'organization.created', data: { organizationId: 'org_p1' } });
  // A second dead letter, sealed to P2 already.
  await publish('organization.created', { organizationId: 'org_p2' });
  const both = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint: created.endpoint.id });
    return page.data.length === 2 ? page.data : undefined;
  }, 30_000, 'a dead letter sealed to P2');
  const underP2 = both.find((d) => d.id !== underP1!.id)!;

  const env = {
    DATABASE_URL: h.db.url, HOOKSTREAM_MASTER_KEY: k2.master,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: k2.deadLetter.secretKey, HOOKSTREAM_PREVIOUS_DEAD_LETTER_SECRET_KEY: k1.deadLetterSecretKey,
  };
  const run = await cli(['keys', 'reseal-dead-letters', '--json', '--batch', '1'], env);
  t.is(run.code, 0, run.stderr);
  t.like(JSON.parse(run.stdout), { resealed: 1, already_current: 1, failed: 0 });
  assertNoSecrets(t, run.stdout + run.stderr, 'reseal-dead-letters');
  t.false(run.stdout.includes('org_p1'), 'the contents are not printed');
  const rowP1 = await sealedOf(underP1!.id);
  t.notThrows(() => openDeadLetter(k2.deadLetter.publicKey, k2.deadLetter.secretKey, rowP1), 'now sealed to P2');
  t.throws(() => openDeadLetter(k1.deadLetterPublicKey, k1.deadLetterSecretKey, rowP1));
  const second = await cli(['keys', 'reseal-dead-letters'], { ...env, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: k2.deadLetter.publicKey });
  t.is(second.code, 0, second.stderr);
  t.regex(second.stdout.trim(), /^dead letters: 0 resealed, 2 already current, 0 failed\nerasure index: 0 rehashed, \d+ already current, 0 pointing at nothing left$/);

  // P1 gone: both still open, and the first one replays with its original webhook-id.
  await h.restart({ ...master, ...p2 });
  t.like((await admin.showDeadLetter({ id: underP1!.id })).message.body, { data: { organizationId: 'org_p1' } });
  t.like((await admin.showDeadLetter({ id: underP2.id })).message.body, { data: { organizationId: 'org_p2' } });
  healthy = true;
  const before = r.received.length;
  await admin.replayDeadLetter({ id: underP1!.id });
  const [got] = (await r.waitFor(before + 1, 20_000)).slice(before);
  t.is(String(got!.headers['webhook-id']), underP1!.webhook_id);
  t.true(verifiesWith(created.signingSecret!, got!));
});

test.serial('reseal-dead-letters refuses to run without the master key, and with a public key that is not the pair\'s', async (t) => {
  const missing = await cli(['keys', 'reseal-dead-letters'], { HOOKSTREAM_DEAD_LETTER_SECRET_KEY: k2.deadLetter.secretKey });
  t.is(missing.code, 1);
  t.regex(missing.stderr, /HOOKSTREAM_MASTER_KEY: is not set and there is no development keys file/);
  const mismatch = await cli(['keys', 'reseal-dead-letters'], {
    HOOKSTREAM_MASTER_KEY: k2.master,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: k2.deadLetter.secretKey, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: k1.deadLetterPublicKey,
    HOOKSTREAM_PREVIOUS_DEAD_LETTER_SECRET_KEY: k1.deadLetterSecretKey,
  });
  t.is(mismatch.code, 1);
  t.regex(mismatch.stderr, /HOOKSTREAM_DEAD_LETTER_SECRET_KEY.*does not belong to HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY/);
  for (const run of [missing, mismatch]) assertNoSecrets(t, run.stdout + run.stderr, 'reseal-dead-letters');
});

test.serial('master key: after a rotation and reseal-dead-letters, erasure finds what was hashed under the retired key', async (t) => {
  const tenant = 'tenant_rot_erase' as TenantId;
  const p2 = { HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: k2.deadLetter.publicKey, HOOKSTREAM_DEAD_LETTER_SECRET_KEY: k2.deadLetter.secretKey };
  const { store } = createEndpoints({ js: h.service.js, jsm: h.service.jsm, masterKey: k2.master, allowPrivateTargets: true });
  const ok = await receiver();
  const failing = await receiver(() => 500);
  await store.create(tenant, { url: ok.url, events: ['user.*'] });
  const dying = await store.create(tenant, { url: failing.url, events: ['user.*'] });
  for (const c of [ok, failing]) secrets.push(c.url);
  // Hashed under K2: the event's index rows and its dead letter.
  await h.publish(tenant, 'user.updated', { userId: 'user_rot', email: 'rot@example.com' });
  await h.publish(tenant, 'user.updated', { userId: 'user_kept' });
  await ok.waitFor(2, 20_000);
  await eventually(async () => ((await admin.listDeadLetters({ endpoint: dying.endpoint.id })).data.length === 2 ? true : undefined), 30_000, 'two dead letters');
  const indexed = () => h.service.orm!.em.fork().execute<{ subject_hash: string }[]>('select subject_hash from erasure_index where tenant = ? order by 1', [tenant]);
  await eventually(async () => ((await indexed()).length === 2 ? true : undefined), 20_000, 'the index rows');
  const underK2 = await indexed();

  // K3 with K2 as the previous key, the reseal, then K2 retired.
  const k3 = generateKeys().masterKey;
  secrets.push(k3);
  await h.restart({ HOOKSTREAM_MASTER_KEY: k3, HOOKSTREAM_PREVIOUS_MASTER_KEY: k2.master, ...p2 });
  const run = await cli(['keys', 'reseal-dead-letters', '--json'], {
    DATABASE_URL: h.db.url, HOOKSTREAM_MASTER_KEY: k3, HOOKSTREAM_PREVIOUS_MASTER_KEY: k2.master, HOOKSTREAM_DEAD_LETTER_SECRET_KEY: k2.deadLetter.secretKey,
  });
  t.is(run.code, 0, run.stderr);
  const out = JSON.parse(run.stdout) as { resealed: number; failed: number; erasure_index: { rehashed: number; unresolved: number } };
  t.true(out.resealed >= 2, 'both dead letters tagged and hashed under K3');
  t.is(out.failed, 0);
  t.true(out.erasure_index.rehashed >= 2, 'the two rows of the tenant, and those of the events before');
  t.is(out.erasure_index.unresolved, 0);
  assertNoSecrets(t, run.stdout + run.stderr, 'reseal-dead-letters');
  t.false(run.stdout.includes('user_rot'));
  const underK3 = await indexed();
  t.is(underK3.length, 2);
  t.false(underK3.some((r) => underK2.some((o) => o.subject_hash === r.subject_hash)), 'no row is left under K2');
  const second = await cli(['keys', 'reseal-dead-letters', '--json'], {
    DATABASE_URL: h.db.url, HOOKSTREAM_MASTER_KEY: k3, HOOKSTREAM_DEAD_LETTER_SECRET_KEY: k2.deadLetter.secretKey,
  });
  t.like(JSON.parse(second.stdout), { resealed: 0, failed: 0, erasure_index: { rehashed: 0, unresolved: 0 } });

  await h.restart({ HOOKSTREAM_MASTER_KEY: k3, ...p2 });
  const erased = await admin.eraseSubject({ tenant, user: 'user_rot' });
  t.like(erased.stores, { events: { erased: 1 }, dead_letters: { erased: 1 }, index: { entries: 1, erased: 1 } });
  const left = await admin.listDeadLetters({ endpoint: dying.endpoint.id });
  t.is(left.data.length, 1);
  t.like((await admin.showDeadLetter({ id: left.data[0]!.id })).message.body, { data: { userId: 'user_kept' } });
});

test.serial('the CLI never creates a stream or changes one: its own settings leave the service\'s streams as they are', async (t) => {
  const configs = async () => {
    const out: Record<string, unknown> = {};
    for await (const si of h.service.jsm.streams.list()) out[si.config.name] = si.config;
    return out;
  };
  const before = await configs();
  t.true(Object.keys(before).length > 5);
  // A shell without the service's environment, and one with other values than the service's.
  const run = await cli(['keys', 'reseal-secrets', '--json'], {
    HOOKSTREAM_MASTER_KEY: k2.master, HOOKSTREAM_QUEUE_RETENTION: '20d', HOOKSTREAM_RETRY_SCHEDULE: '1s', HOOKSTREAM_REPLICAS: '1', HOOKSTREAM_MAX_QUEUED: '5',
  });
  t.is(run.code, 0, run.stderr);
  t.deepEqual(await configs(), before);

  // A NATS without hookstream's streams: the CLI says so and creates none.
  const bare = await startNatsServer();
  try {
    const nowhere = await runCli(['keys', 'reseal-secrets'], { ...process.env, NATS_URL: bare.url, HOOKSTREAM_MASTER_KEY: k2.master });
    t.is(nowhere.code, 1);
    t.regex(nowhere.stderr, /has no (EVENTS|ENDPOINTS) stream: start the service \(hookstream serve\) once/);
    const nc = await connect({ servers: bare.url });
    const names: string[] = [];
    for await (const name of (await jetstreamManager(nc)).streams.names()) names.push(name);
    await nc.close();
    t.deepEqual(names, []);
  } finally {
    await bare.dispose();
  }
});

test.serial('no log line of the service shows a key or a secret', (t) => {
  t.true(logLines.length > 0);
  assertNoSecrets(t, logLines.join('\n'), 'the service log');
});

test('fold: secrets_resealed replaces the secrets and moves version and updated_at only; a malformed one is refused', (t) => {
  const id = 'webhook_0fold000000001' as EndpointId;
  const created = applyEndpointEvent(undefined, {
    v: 1, type: 'endpoint.created', id, tenant: TENANT, url: 'https://example.com/h', events: ['user.*'], description: 'd',
    secret: 'old-a', at: '2026-01-01T00:00:00.000Z',
  }, 3);
  const rotatedState = applyEndpointEvent(created, { v: 1, type: 'endpoint.secret_rotated', id, secret: 'old-b', previous_expires_at: '2026-01-02T00:00:00.000Z', at: '2026-01-01T01:00:00.000Z' }, 5);
  const secretsAfter = [{ sealed: 'v2:new-b', expires_at: null }, { sealed: 'v2:new-a', expires_at: '2026-01-02T00:00:00.000Z' }];
  const resealed = applyEndpointEvent(rotatedState, { v: 1, type: 'endpoint.secrets_resealed', id, secrets: secretsAfter, at: '2026-01-01T02:00:00.000Z' }, 9);
  t.deepEqual(resealed, { ...rotatedState, secrets: secretsAfter, version: 9, updatedAt: '2026-01-01T02:00:00.000Z', eventsSince: rotatedState.eventsSince! + 1 });
  t.true(isEndpointEvent({ v: 1, type: 'endpoint.secrets_resealed', id, secrets: secretsAfter, at: 'x' }));
  for (const secrets of [[], 'v2:x', [{ sealed: 1, expires_at: null }], [{ sealed: 'v2:x' }], [null]]) {
    t.throws(() => applyEndpointEvent(rotatedState, { v: 1, type: 'endpoint.secrets_resealed', id, secrets, at: 'x' } as never, 10), undefined, JSON.stringify(secrets));
  }
});
