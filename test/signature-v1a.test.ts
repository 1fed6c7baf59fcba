// Standard Webhooks v1a (issue 11): ed25519 signatures byte-compatible with the reference (its published
// test vector), and v1a endpoints through the real pipeline (api, projector, router, delivery) to a
// loopback receiver that verifies with an independent ed25519 implementation (tweetnacl): the create
// answer, every read, rotation with and after a grace period, and the private key found nowhere in
// plaintext (the streams' store, Postgres, the logs).
import test, { type ExecutionContext } from 'ava';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import nacl from 'tweetnacl';
import sodium from 'libsodium-wrappers';
import { Webhook } from 'standardwebhooks';
import {
  ed25519PublicKeyOf, ed25519SigningKey, newEd25519KeyPair, sign, signatureHeader, verifySignatureV1a,
} from '../src/domain/signature.ts';
import { SecretSealer } from '../src/crypto/sodium.ts';
import { newIdBody, type EndpointId, type TenantId } from '../src/domain/ids.ts';
import { endpointSubject } from '../streams/endpoints.ts';
import { eventually } from './helpers/service.ts';
import { startTestService, tenantClient, type TestService } from './helpers/fixture.ts';
import type { Received } from './helpers/receiver.ts';

// ---- the reference's published vector ----

// standard-webhooks/standard-webhooks, libraries/go/webhook_asymmetric_test.go, TestAsymmetricWebhookSign:
// the key is the base64 of a 32-byte seed (ed25519.NewKeyFromSeed), with or without `whsk_`.
const VECTOR = {
  key: 'VEVTVFNJR05JTkdLRVlET05PVFVTRVRISVNGT1JBTlk=',
  msgId: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
  timestamp: 1614265330,
  payload: '{"test": 2432232314}',
  signature: 'v1a,tQ9V2XOqn7jL/DQenEFpqIugdBVtiMmER5mhSkXBNwM0mkATuDe6KYYUuxqtaiHeYGb7KaaBRdM5WqyeFiL8Ag==',
};

test('the Standard Webhooks v1a test vector: same signature, with or without the whsk_ prefix', (t) => {
  for (const key of [VECTOR.key, `whsk_${VECTOR.key}`]) {
    t.is(sign(ed25519SigningKey(key), VECTOR.msgId, VECTOR.timestamp, VECTOR.payload), VECTOR.signature);
    t.is(sign(ed25519SigningKey(key), VECTOR.msgId, VECTOR.timestamp, Buffer.from(VECTOR.payload)), VECTOR.signature);
  }
  // tweetnacl derives the same public key from the seed and accepts the signature.
  const pair = nacl.sign.keyPair.fromSeed(Buffer.from(VECTOR.key, 'base64'));
  t.is(ed25519PublicKeyOf(VECTOR.key), `whpk_${Buffer.from(pair.publicKey).toString('base64')}`);
  const message = Buffer.from(`${VECTOR.msgId}.${VECTOR.timestamp}.${VECTOR.payload}`);
  t.true(nacl.sign.detached.verify(message, Buffer.from(VECTOR.signature.slice(4), 'base64'), pair.publicKey));
  t.true(verifySignatureV1a(ed25519PublicKeyOf(VECTOR.key), `v1,abc ${VECTOR.signature}`, VECTOR.msgId, VECTOR.timestamp, VECTOR.payload));
  t.false(verifySignatureV1a(ed25519PublicKeyOf(VECTOR.key), VECTOR.signature, VECTOR.msgId, VECTOR.timestamp + 1, VECTOR.payload));
  // A 64-byte tweetnacl secret key (seed || public key) signs the same.
  t.is(sign(ed25519SigningKey(Buffer.from(pair.secretKey).toString('base64')), VECTOR.msgId, VECTOR.timestamp, VECTOR.payload), VECTOR.signature);
});

test('generated key pairs: whsk_ is a 32-byte seed, whpk_ its 32-byte public key, as tweetnacl derives it', (t) => {
  const pair = newEd25519KeyPair();
  t.regex(pair.secretKey, /^whsk_[A-Za-z0-9+/]{43}=$/);
  t.regex(pair.publicKey, /^whpk_[A-Za-z0-9+/]{43}=$/);
  const seed = Buffer.from(pair.secretKey.slice(5), 'base64');
  t.is(`whpk_${Buffer.from(nacl.sign.keyPair.fromSeed(seed).publicKey).toString('base64')}`, pair.publicKey);
  // One header may carry v1 and v1a entries (mixed keys), each in its own format.
  const header = signatureHeader([ed25519SigningKey(pair.secretKey), Buffer.alloc(32, 1)], 'msg_1', 5, 'body');
  t.regex(header, /^v1a,[A-Za-z0-9+/]{86}== v1,[A-Za-z0-9+/]{43}=$/);
});

// ---- through the service ----

let h: TestService;
const logLines: string[] = [];

test.before(async () => {
  h = await startTestService('sig_v1a', { HOOKSTREAM_ROLES: 'api,projector,router,delivery,deadletter', HOOKSTREAM_LOG_LEVEL: 'debug' }, {
    logWrite: (line) => logLines.push(line),
  });
});
test.after.always(() => h?.closeAll());

const clientFor = (t: ExecutionContext, tenant: string) => tenantClient(h, t, tenant);
const publishUserCreated = (tenant: string, userId: string) => h.publish(tenant, 'user.created', { userId });

/** The v1a entries of the delivery's header that tweetnacl verifies under `publicKey` (whpk_…). */
function naclVerified(publicKey: string, got: Received): number {
  const raw = Buffer.from(publicKey.slice('whpk_'.length), 'base64');
  const message = Buffer.from(`${String(got.headers['webhook-id'])}.${String(got.headers['webhook-timestamp'])}.${got.body}`);
  return String(got.headers['webhook-signature']).split(' ')
    .filter((s) => s.startsWith('v1a,') && nacl.sign.detached.verify(message, Buffer.from(s.slice(4), 'base64'), raw)).length;
}
const entries = (got: Received) => String(got.headers['webhook-signature']).split(' ');
const userIdOf = (got: Received): string => (JSON.parse(got.body) as { data: { userId: string } }).data.userId;

test('a v1a endpoint: no signing_secret, its public key on every read; a v1 endpoint has no public key', async (t) => {
  const c = await clientFor(t, 'tenant_v1a_reads');
  const a = await c.post('/v1/webhooks', { url: 'https://a.example.com/hook', events: ['user.*'], signature_scheme: 'v1a' });
  t.is(a.status, 201);
  t.is(a.body.signature_scheme, 'v1a');
  t.regex(a.body.signing_public_key, /^whpk_[A-Za-z0-9+/]{43}=$/);
  t.false('signing_secret' in a.body);
  const v1 = await c.post('/v1/webhooks', { url: 'https://b.example.com/hook', events: ['user.*'] });
  t.is(v1.status, 201);
  t.is(v1.body.signature_scheme, 'v1');
  t.regex(v1.body.signing_secret, /^whsec_/);
  t.false('signing_public_key' in v1.body);

  const got = await c.get(`/v1/webhooks/${a.body.id}`);
  t.is(got.body.signing_public_key, a.body.signing_public_key);
  t.is(got.body.signature_scheme, 'v1a');
  t.false('signing_secret' in got.body);
  const gotV1 = await c.get(`/v1/webhooks/${v1.body.id}`);
  t.is(gotV1.body.signature_scheme, 'v1');
  t.false('signing_public_key' in gotV1.body);
  const list = await c.get('/v1/webhooks');
  const byId = new Map((list.body.data as { id: string }[]).map((e) => [e.id, e]));
  t.like(byId.get(a.body.id), { signature_scheme: 'v1a', signing_public_key: a.body.signing_public_key });
  t.false('signing_public_key' in byId.get(v1.body.id)!);
  const patched = await c.patch(`/v1/webhooks/${a.body.id}`, { description: 'still v1a' });
  t.like(patched.body, { signature_scheme: 'v1a', signing_public_key: a.body.signing_public_key });

  // The scheme is chosen at creation only, and only v1 or v1a.
  const bad = await c.post('/v1/webhooks', { url: 'https://c.example.com/hook', events: ['user.*'], signature_scheme: 'v2' });
  t.is(bad.status, 422);
  t.deepEqual(bad.body.error.details.map((d: { field: string }) => d.field), ['signature_scheme']);
  const change = await c.patch(`/v1/webhooks/${a.body.id}`, { signature_scheme: 'v1' });
  t.is(change.status, 422);
});

test('deliveries to a v1a endpoint carry one v1a signature that tweetnacl verifies; rotation signs with both pairs during the grace period, then the new one', async (t) => {
  const tenant = 'tenant_v1a_delivery';
  const c = await clientFor(t, tenant);
  const r = await h.receiver();
  const created = await c.post('/v1/webhooks', { url: r.url, events: ['user.created'], signature_scheme: 'v1a' });
  t.is(created.status, 201);
  const id: string = created.body.id;
  const first: string = created.body.signing_public_key;

  await publishUserCreated(tenant, 'user_1');
  const [d1] = await r.waitFor(1);
  t.is(entries(d1!).length, 1, 'one signature');
  t.regex(String(d1!.headers['webhook-signature']), /^v1a,[A-Za-z0-9+/]{86}==$/, 'v1a and no v1 entry');
  t.is(naclVerified(first, d1!), 1);
  t.is(Buffer.from(entries(d1!)[0]!.slice(4), 'base64').length, 64);

  const rotated = await c.post(`/v1/webhooks/${id}/rotate-secret`, { grace_period_seconds: 3 });
  t.is(rotated.status, 200);
  t.deepEqual(Object.keys(rotated.body).sort(), ['id', 'signing_public_key']);
  const second: string = rotated.body.signing_public_key;
  t.not(second, first);
  t.is((await c.get(`/v1/webhooks/${id}`)).body.signing_public_key, second);

  await publishUserCreated(tenant, 'user_2');
  const d2 = (await r.waitFor(2))[1]!;
  t.is(userIdOf(d2), 'user_2');
  t.is(entries(d2).length, 2, 'new and old during the grace period');
  t.true(entries(d2).every((s) => s.startsWith('v1a,')));
  t.is(naclVerified(second, d2), 1);
  t.is(naclVerified(first, d2), 1);

  // After the grace period only the new pair signs.
  await new Promise((resolve) => setTimeout(resolve, 3200));
  await publishUserCreated(tenant, 'user_3');
  const d3 = (await r.waitFor(3))[2]!;
  t.is(userIdOf(d3), 'user_3');
  t.is(entries(d3).length, 1);
  t.is(naclVerified(second, d3), 1);
  t.is(naclVerified(first, d3), 0);

  // Grace 0: the old pair stops at once.
  const third: string = (await c.post(`/v1/webhooks/${id}/rotate-secret`, { grace_period_seconds: 0 })).body.signing_public_key;
  await publishUserCreated(tenant, 'user_4');
  const d4 = (await r.waitFor(4))[3]!;
  t.is(entries(d4).length, 1);
  t.is(naclVerified(third, d4), 1);
  t.is(naclVerified(second, d4), 0);
});

/** Every file under `dir`, recursively, with its contents; a file the server removes meanwhile (a `.tmp` it renamed) is left out. */
function files(dir: string): Buffer[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    try {
      return statSync(p).isDirectory() ? files(p) : [readFileSync(p)];
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw e;
    }
  });
}

test('the private key is in plaintext nowhere: not in the streams\' store, Postgres or the logs', async (t) => {
  const tenant = 'tenant_v1a_leaks';
  const c = await clientFor(t, tenant);
  const r = await h.receiver();
  const created = await c.post('/v1/webhooks', { url: r.url, events: ['user.created'], signature_scheme: 'v1a' });
  const id = created.body.id as EndpointId;
  const rotated = await c.post(`/v1/webhooks/${id}/rotate-secret`, { grace_period_seconds: 3600 });
  await publishUserCreated(tenant, 'user_leak');
  await r.waitFor(1);

  // The private keys, opened as only a holder of the master key can: the current and the rotated-out one.
  const state = await h.store.get(tenant as TenantId, id);
  const sealer = new SecretSealer(h.keys.masterKey);
  const secrets = state.secrets.map((s) => sealer.open(s.sealed, id));
  t.is(secrets.length, 2);
  t.deepEqual(secrets.map(ed25519PublicKeyOf), [rotated.body.signing_public_key, created.body.signing_public_key]);
  const needles = secrets.flatMap((s) => {
    const seed = Buffer.from(s.slice(5), 'base64');
    const naclSecret = Buffer.from(nacl.sign.keyPair.fromSeed(seed).secretKey);
    return [
      { what: 'whsk_ text', bytes: Buffer.from(s) },
      { what: 'seed base64', bytes: Buffer.from(s.slice(5)) },
      { what: 'seed bytes', bytes: seed },
      { what: 'seed base64url', bytes: Buffer.from(seed.toString('base64url')) },
      { what: 'seed hex', bytes: Buffer.from(seed.toString('hex')) },
      { what: 'tweetnacl secret key base64', bytes: Buffer.from(naclSecret.toString('base64')) },
    ];
  });

  // The streams' store: every file the nats-server wrote. The public key is there (the grep works).
  const store = files(h.nats.storeDir);
  t.true(store.some((b) => b.includes(Buffer.from(rotated.body.signing_public_key))), 'the search finds what is stored');
  // Postgres: every table as text.
  const db = new pg.Client({ connectionString: h.db.url });
  await db.connect();
  const tables = (await db.query<{ tablename: string }>("select tablename from pg_tables where schemaname = 'public'")).rows.map((x) => x.tablename);
  const dump: string[] = [];
  for (const table of tables) dump.push(JSON.stringify((await db.query(`select * from "${table}"`)).rows));
  await db.end();
  const pgText = Buffer.from(dump.join('\n'));
  t.true(pgText.includes(Buffer.from(rotated.body.signing_public_key)), 'the endpoints table holds the public key');
  const logs = Buffer.from(logLines.join('\n'));
  t.true(logLines.length > 0);

  for (const n of needles) {
    t.false(store.some((b) => b.includes(n.bytes)), `${n.what} in the NATS store`);
    t.false(pgText.includes(n.bytes), `${n.what} in Postgres`);
    t.false(logs.includes(n.bytes), `${n.what} in the logs`);
  }
});

/** A value as sealed before issue 8: base64(nonce || secretbox), no prefix, no endpoint binding. */
function sealLegacy(masterKey: string, plaintext: string): string {
  const nonce = sodium.randombytes_buf(24);
  const box = sodium.crypto_secretbox_easy(sodium.from_string(plaintext), nonce, Buffer.from(masterKey, 'base64'));
  return Buffer.concat([nonce, box]).toString('base64');
}

/** An endpoint.created appended straight to the stream, as someone able to write ENDPOINTS could. */
async function forgeEndpoint(tenant: string, url: string, sealed: string): Promise<EndpointId> {
  const id = `webhook_${newIdBody()}` as EndpointId;
  await h.service.js.publish(endpointSubject(id), JSON.stringify({
    v: 1, type: 'endpoint.created', id, tenant, url, events: ['user.created'], description: null, secret: sealed, at: new Date().toISOString(),
  }), { expect: { lastSubjectSequence: 0 } });
  await eventually(() => (h.service.directory?.get(id) ? true : undefined), 10_000, `directory sees ${id}`);
  return id;
}

test('sealed secrets are bound to their endpoint: one copied into another endpoint\'s event signs nothing there; a legacy value still delivers (issue 8)', async (t) => {
  const tenant = 'tenant_sealed_copy';
  const a = await h.store.create(tenant as TenantId, { url: 'https://a.example.com/hook', events: ['user.created'] });
  const copied = await h.receiver();
  const copiedId = await forgeEndpoint(tenant, copied.url, a.endpoint.secrets[0]!.sealed);
  // A value in the format before issue 8 opens for any endpoint: existing endpoints keep working.
  const legacySecret = `whsec_${Buffer.alloc(32, 3).toString('base64')}`;
  const legacy = await h.receiver();
  await forgeEndpoint(tenant, legacy.url, sealLegacy(h.keys.masterKey, legacySecret));

  await publishUserCreated(tenant, 'user_copy');
  const [got] = await legacy.waitFor(1);
  t.true(new Webhook(legacySecret).verify(got!.body, {
    'webhook-id': String(got!.headers['webhook-id']), 'webhook-timestamp': String(got!.headers['webhook-timestamp']),
    'webhook-signature': String(got!.headers['webhook-signature']),
  }) !== undefined);
  await eventually(() => (logLines.some((l) => l.includes(copiedId) && l.includes('delivery attempt crashed')) ? true : undefined), 10_000, 'the failed open logged');
  t.is(copied.received.length, 0, 'nothing is signed with a key copied from another endpoint');
  t.false(logLines.some((l) => l.includes(a.signingSecret!)), 'the secret is not logged');
});
