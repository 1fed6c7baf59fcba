// Idempotency-Key on the API's other POSTs (issue 23; POST /v1/webhooks's own is in api.test.ts): restore,
// rotate-secret and portal sessions answer a retry with the first answer (a new secret or a single-use link
// shown once is shown again), do the work once, keep the answer sealed in Postgres, refuse the key with
// another request (409) or malformed (400), and keep nothing of a request that failed. Real API over
// HTTP, NATS and Postgres; every answer is checked against the OpenAPI document by the client.
import test from 'ava';
import { startHarness, type Harness } from './helpers/service.ts';
import { apiClient, type ApiClient } from './helpers/api-client.ts';
import { createApiKey } from '../src/apikeys/store.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';
import { requestHash } from '../src/api/idempotency.ts';
import { request } from 'node:http';

let h: Harness;

test.before(async () => {
  h = await startHarness('api_idempotency', { HOOKSTREAM_ROLES: 'api,projector', HOOKSTREAM_RATE_LIMIT: '100000' });
});
test.after.always(async () => {
  await h?.close();
});

const as = async (t: Parameters<typeof apiClient>[2], tenant: string): Promise<ApiClient> =>
  apiClient(h.service.api!.url, (await createApiKey(h.service.orm!.em.fork(), tenant as TenantId, 'test')).key, t);
const withKey = (key: string) => ({ headers: { 'idempotency-key': key } });
const MALFORMED = ['', 'has space', 'x'.repeat(256), 'ünï'];

async function newEndpoint(c: ApiClient, n: number): Promise<EndpointId> {
  const res = await c.post('/v1/webhooks', { url: `https://hooks.example.com/${n}`, events: ['user.created'] });
  return res.body.id as EndpointId;
}
const secretsOf = async (tenant: string, id: EndpointId) => (await h.store.get(tenant as TenantId, id)).secrets.length;
const storedAnswer = async (tenant: string, key: string) => (await h.service.orm!.em.fork().execute<{ answer: string | null }[]>(
  'select answer from idempotency_keys where tenant = ? and key = ?', [tenant, key]))[0]?.answer;

test('rotate-secret: a retry gets the same new secret and rotates nothing more; the answer is kept sealed', async (t) => {
  const tenant = 'tenant_idem_rotate';
  const c = await as(t, tenant);
  const id = await newEndpoint(c, 1);
  const body = { grace_period_seconds: 3600 };
  const first = await c.post(`/v1/webhooks/${id}/rotate-secret`, body, withKey('rotate-1'));
  t.is(first.status, 200);
  t.is(first.headers.get('idempotent-replayed'), null);
  t.regex(first.body.signing_secret, /^whsec_/);
  const again = await c.post(`/v1/webhooks/${id}/rotate-secret`, body, withKey('rotate-1'));
  t.is(again.status, 200);
  t.is(again.headers.get('idempotent-replayed'), 'true');
  t.deepEqual(again.body, first.body, 'the secret shown once is shown again to the retry');
  t.is(await secretsOf(tenant, id), 2, 'one rotation: the new secret and the old one in its grace');

  const stored = await storedAnswer(tenant, 'rotate-1');
  t.regex(stored ?? '', /^v2:/, 'sealed');
  t.false(stored!.includes(first.body.signing_secret) || stored!.includes('whsec_'));

  // The key with another request: another body, another endpoint, another route.
  t.is((await c.post(`/v1/webhooks/${id}/rotate-secret`, { grace_period_seconds: 0 }, withKey('rotate-1'))).status, 409);
  const other = await newEndpoint(c, 2);
  t.is((await c.post(`/v1/webhooks/${other}/rotate-secret`, body, withKey('rotate-1'))).status, 409);
  t.is((await c.post(`/v1/webhooks/${id}/restore`, undefined, withKey('rotate-1'))).status, 409);
  t.is((await c.post('/v1/webhooks', { url: 'https://hooks.example.com/3', events: ['user.created'] }, withKey('rotate-1'))).status, 409);
  for (const bad of MALFORMED) t.is((await c.post(`/v1/webhooks/${other}/rotate-secret`, body, withKey(bad))).status, 400);
  t.is(await secretsOf(tenant, id), 2);
  t.is(await secretsOf(tenant, other), 1, 'nothing refused rotated anything');

  // Each tenant has its own keys.
  const theirs = await as(t, 'tenant_idem_rotate_other');
  const theirId = await newEndpoint(theirs, 4);
  const their = await theirs.post(`/v1/webhooks/${theirId}/rotate-secret`, body, withKey('rotate-1'));
  t.is(their.status, 200);
  t.is(their.headers.get('idempotent-replayed'), null);
});

test('rotate-secret: two tries at once rotate once; each answer is that secret or a 409 to retry', async (t) => {
  const tenant = 'tenant_idem_race';
  const c = await as(t, tenant);
  const id = await newEndpoint(c, 5);
  const both = await Promise.all([0, 1, 2].map(() => c.post(`/v1/webhooks/${id}/rotate-secret`, {}, withKey('race-rotate'))));
  t.true(both.every((r) => r.status === 200 || r.status === 409), both.map((r) => r.status).join());
  const secrets = new Set(both.filter((r) => r.status === 200).map((r) => r.body.signing_secret as string));
  t.is(secrets.size, 1);
  t.is(await secretsOf(tenant, id), 2, 'one rotation');
  const retry = await c.post(`/v1/webhooks/${id}/rotate-secret`, {}, withKey('race-rotate'));
  t.is(retry.body.signing_secret, [...secrets][0]);
});

test('restore: a retry answers the restored endpoint (not a 409); a refused restore keeps nothing, so its retry runs', async (t) => {
  const tenant = 'tenant_idem_restore';
  const c = await as(t, tenant);
  const id = await newEndpoint(c, 6);
  await h.store.disable(id, 'gone');
  const first = await c.post(`/v1/webhooks/${id}/restore`, undefined, withKey('restore-1'));
  t.is(first.status, 200);
  t.is(first.body.status, 'active');
  const again = await c.post(`/v1/webhooks/${id}/restore`, undefined, withKey('restore-1'));
  t.is(again.status, 200);
  t.is(again.headers.get('idempotent-replayed'), 'true');
  t.deepEqual(again.body, first.body);
  t.is((await c.post(`/v1/webhooks/${id}/restore`)).status, 409, 'without the key: it is active, the replay restored nothing');

  // Refused (active): the key keeps nothing. Disabled again, the same key's retry restores.
  t.is((await c.post(`/v1/webhooks/${id}/restore`, undefined, withKey('restore-2'))).status, 409);
  t.is(await storedAnswer(tenant, 'restore-2'), undefined);
  await h.store.disable(id, 'failing');
  const retried = await c.post(`/v1/webhooks/${id}/restore`, undefined, withKey('restore-2'));
  t.is(retried.status, 200);
  t.is(retried.headers.get('idempotent-replayed'), null);
  for (const bad of MALFORMED) t.is((await c.post(`/v1/webhooks/${id}/restore`, undefined, withKey(bad))).status, 400);
});

test('portal sessions: a retry gets the same single-use link (one made), sealed in Postgres; another API key\'s request under the key is 409', async (t) => {
  const tenant = 'tenant_idem_portal';
  const c = await as(t, tenant);
  const first = await c.post('/v1/portal/sessions', undefined, withKey('portal-1'));
  t.is(first.status, 201);
  const again = await c.post('/v1/portal/sessions', undefined, withKey('portal-1'));
  t.is(again.status, 201);
  t.is(again.headers.get('idempotent-replayed'), 'true');
  t.deepEqual(again.body, first.body);
  const links = await h.service.orm!.em.fork().execute<{ n: string }[]>("select count(*) as n from portal_sessions where tenant = ? and kind = 'link'", [tenant]);
  t.is(Number(links[0]!.n), 1, 'one link made');
  const token = new URL(first.body.url).searchParams.get('token')!;
  t.false((await storedAnswer(tenant, 'portal-1'))!.includes(token), 'the link is sealed');
  // The replayed link is the real one, still single-use.
  t.is((await fetch(again.body.url, { redirect: 'manual' })).status, 303);
  t.is((await fetch(again.body.url, { redirect: 'manual' })).status, 410);

  t.is((await (await as(t, tenant)).post('/v1/portal/sessions', undefined, withKey('portal-1'))).status, 409, 'another key of the tenant');
  for (const bad of MALFORMED) t.is((await c.post('/v1/portal/sessions', undefined, withKey(bad))).status, 400);
});

test('a claim whose request died is taken over after a minute; one still running answers 409', async (t) => {
  const tenant = 'tenant_idem_claims';
  const c = await as(t, tenant);
  const id = await newEndpoint(c, 7);
  // Claims as the handler makes them, with no answer yet: one made 5 s ago, one 2 minutes ago.
  const hash = requestHash({ route: 'rotate-secret', id, graceMs: 60_000 });
  const claim = (key: string, age: string) => h.service.orm!.em.fork().execute(
    `insert into idempotency_keys (tenant, key, request_hash, endpoint_id, answer, created_at) values (?, ?, ?, null, null, now() - interval '${age}')`, [tenant, key, hash]);
  const body = { grace_period_seconds: 60 };
  await claim('running', '5 seconds');
  const running = await c.post(`/v1/webhooks/${id}/rotate-secret`, body, withKey('running'));
  t.is(running.status, 409);
  t.regex(running.body.error.message, /still in progress/);
  t.is(await secretsOf(tenant, id), 1);
  await claim('died', '2 minutes');
  const taken = await c.post(`/v1/webhooks/${id}/rotate-secret`, body, withKey('died'));
  t.is(taken.status, 200);
  t.regex(taken.body.signing_secret, /^whsec_/);
  t.is((await c.post(`/v1/webhooks/${id}/rotate-secret`, body, withKey('died'))).body.signing_secret, taken.body.signing_secret);
  t.is(await secretsOf(tenant, id), 2);
});

test('create: a retry after the endpoint changed (secret rotated, deleted) is a 409 without any secret', async (t) => {
  const tenant = 'tenant_idem_create_changed';
  const c = await as(t, tenant);
  const body = { url: 'https://hooks.example.com/changed', events: ['user.created'] };
  const first = await c.post('/v1/webhooks', body, withKey('create-1'));
  t.is(first.status, 201);
  const unchanged = await c.post('/v1/webhooks', body, withKey('create-1'));
  t.is(unchanged.status, 201);
  t.is(unchanged.body.signing_secret, first.body.signing_secret, 'unchanged: the first answer again');

  const rotated = await c.post(`/v1/webhooks/${first.body.id}/rotate-secret`, { grace_period_seconds: 0 });
  t.is(rotated.status, 200);
  const afterRotation = await c.post('/v1/webhooks', body, withKey('create-1'));
  t.is(afterRotation.status, 409);
  t.regex(afterRotation.body.error.message, new RegExp(`already created webhook endpoint ${first.body.id}, which has changed since \\(active\\)`));
  t.false(JSON.stringify(afterRotation.body).includes('whsec_'), 'neither the first secret nor the current one');

  t.is((await c.delete(`/v1/webhooks/${first.body.id}`)).status, 200);
  const afterDelete = await c.post('/v1/webhooks', body, withKey('create-1'));
  t.is(afterDelete.status, 409);
  t.regex(afterDelete.body.error.message, /\(deleted\)/);
  t.false(JSON.stringify(afterDelete.body).includes('whsec_'));
});

test('a portal link is made from the configured public URL (else the listen address), never from the request\'s Host header', async (t) => {
  const { key } = await createApiKey(h.service.orm!.em.fork(), 'tenant_portal_host' as TenantId, 'test');
  const api = new URL(h.service.api!.url);
  const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request({
      host: api.hostname, port: api.port, method: 'POST', path: '/v1/portal/sessions',
      headers: { host: 'attacker.example', authorization: `Bearer ${key}`, 'x-forwarded-host': 'attacker.example', 'x-forwarded-proto': 'https' },
    }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => { body += c.toString(); });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
  t.is(answer.status, 201, answer.body);
  const url = new URL((JSON.parse(answer.body) as { url: string }).url);
  t.is(url.origin, api.origin);
  t.is(url.pathname, '/portal/start');
});
