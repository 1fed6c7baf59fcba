// The management API over real HTTP, against the real service (api and projector roles), real NATS and
// real Postgres: every route, every error status, tenant isolation, and the envelope on every failure.
// Every response is also checked against the OpenAPI document (test/helpers/api-client.ts).
import test, { type ExecutionContext } from 'ava';
import { eventually, startHarness, type Harness } from './helpers/service.ts';
import { apiClient, type ApiClient } from './helpers/api-client.ts';
import { createApiKey, revokeApiKey } from '../src/apikeys/store.ts';
import { createApi } from '../src/api/app.ts';
import { startApiServer, type ApiServer } from '../src/api/server.ts';
import { OPENAPI_DOCUMENT } from '../src/api/openapi.ts';
import { describeCatalogue } from '../src/domain/catalogue.ts';
import { checkTargetUrl } from '../src/delivery/target-policy.ts';
import type { EndpointStore } from '../src/endpoints/store.ts';
import { createLogger, silentLogger } from '../src/log.ts';
import { createTestDatabase } from './helpers/database.ts';
import { closeDatabase, openDatabase } from '../src/db/orm.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { ProjectionLagError } from '../projections/wait.ts';
import { SecretSealer } from '../src/crypto/sodium.ts';

let h: Harness;
const servers: ApiServer[] = [];

test.before(async () => {
  // Production's URL policy (no private targets); a rate limit no test here reaches.
  h = await startHarness('api', { HOOKSTREAM_ROLES: 'api,projector', HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '0', HOOKSTREAM_RATE_LIMIT: '100000' });
});
test.after.always(async () => {
  for (const s of servers) await s.close();
  await h?.close();
});

const base = () => h.service.api!.url;
const sealer = () => new SecretSealer(h.keys.masterKey);
const newKey = async (tenant: string) => (await createApiKey(h.service.orm!.em.fork(), tenant as TenantId, 'test')).key;
const as = async (t: Parameters<typeof apiClient>[2], tenant: string): Promise<ApiClient> => apiClient(base(), await newKey(tenant), t);
const endpointBody = (n = 1) => ({ url: `https://hooks.example.com/${n}`, events: ['user.created', 'organization.*'], description: `endpoint ${n}` });

const envelope = (t: { is: (a: unknown, b: unknown, m?: string) => void; true: (a: boolean, m?: string) => void }, res: { status: number; body: any; headers: Headers }, status: number, code: string) => {
  t.is(res.status, status, JSON.stringify(res.body));
  t.is(res.body?.error?.code, code);
  t.true(typeof res.body?.error?.message === 'string' && Array.isArray(res.body?.error?.details), 'error envelope');
  t.true(Boolean(res.headers.get('x-request-id')), 'x-request-id');
};

test('/healthz, /readyz and /metrics are not on the API port: 404 in the envelope, with or without a key', async (t) => {
  // They are served on the ops listener (OPS_HOST:OPS_PORT); the metrics name every tenant's endpoints.
  const anonymous = apiClient(base(), undefined, t);
  const withKey = await as(t, 'tenant_ops_paths');
  for (const path of ['/healthz', '/readyz', '/metrics']) {
    for (const c of [anonymous, withKey]) {
      const res = await c.get(path);
      envelope(t, res, 404, 'not_found');
      t.false(res.text.includes('hookstream_'), 'no metric in the answer');
    }
    envelope(t, await anonymous.request('POST', path), 404, 'not_found');
  }
  t.regex((await anonymous.get('/metrics')).headers.get('x-request-id') ?? '', /^req_[0-9a-z]{26}$/);
  t.is((await fetch(`${h.service.opsUrl}/metrics`)).status, 200, 'the ops listener serves them');
  t.not(new URL(h.service.opsUrl).port, new URL(base()).port);
});

test('an authenticated answer carries the service\'s own time in Server-Timing; a refused key gets none', async (t) => {
  const c = await as(t, 'tenant_timing');
  for (const res of [await c.get('/v1/webhooks'), await c.get('/v1/webhooks/webhook_00000000000000000000000000'), await c.post('/v1/webhooks', { url: 'x' })]) {
    const timing = res.headers.get('server-timing') ?? '';
    t.regex(timing, /^app;dur=\d+\.\d$/, `${res.status}: ${timing}`);
  }
  t.is((await apiClient(base(), 'hs_live_not_a_key', t).get('/v1/webhooks')).headers.get('server-timing'), null);
  t.is((await apiClient(base(), undefined, t).get('/v1/webhooks')).headers.get('server-timing'), null);
});

test('x-request-id: a plain caller id is kept, anything else replaced', async (t) => {
  const c = apiClient(base(), undefined, t);
  t.is((await c.get('/healthz', { headers: { 'x-request-id': 'trace-123.abc' } })).headers.get('x-request-id'), 'trace-123.abc');
  t.regex((await c.get('/healthz', { headers: { 'x-request-id': 'a b<script>' } })).headers.get('x-request-id') ?? '', /^req_/);
});

test('401: missing, malformed, unknown and revoked keys, on every /v1 path', async (t) => {
  const c = apiClient(base(), undefined, t);
  const missing = await c.get('/v1/webhooks');
  envelope(t, missing, 401, 'unauthorized');
  t.is(missing.headers.get('www-authenticate'), 'Bearer');
  for (const authorization of ['Basic dXNlcjpwYXNz', 'Bearer', 'Bearer  ', 'hs_live_x', 'Bearer a b', `Bearer hs_live_${'A'.repeat(43)}`, `Bearer hs_live_${'A'.repeat(44)}`]) {
    envelope(t, await c.get('/v1/webhooks', { headers: { authorization } }), 401, 'unauthorized');
  }
  // Unknown paths and methods under /v1 need a key too: nothing is learnt without one.
  envelope(t, await c.get('/v1/nothing-here'), 401, 'unauthorized');
  envelope(t, await c.request('PUT', '/v1/webhooks'), 401, 'unauthorized');
  envelope(t, await c.get('/v1/openapi.json'), 401, 'unauthorized');

  const em = h.service.orm!.em.fork();
  const created = await createApiKey(em, 'tenant_revoked' as TenantId, 'soon revoked');
  const withKey = apiClient(base(), created.key, t);
  t.is((await withKey.get('/v1/webhooks')).status, 200);
  t.is((await withKey.get('/v1/webhooks', { headers: { authorization: `bearer ${created.key}` } })).status, 200, 'scheme is case-insensitive');
  await revokeApiKey(em, created.id);
  envelope(t, await withKey.get('/v1/webhooks'), 401, 'unauthorized');
});

test('POST /v1/webhooks creates an endpoint: 201 with the signing secret, shown only there', async (t) => {
  const c = await as(t, 'tenant_create');
  const res = await c.post('/v1/webhooks', endpointBody(1));
  t.is(res.status, 201);
  t.regex(res.body.id, /^webhook_[0-9a-z]{26}$/);
  t.regex(res.body.signing_secret, /^whsec_/);
  t.like(res.body, { url: 'https://hooks.example.com/1', events: ['user.created', 'organization.*'], description: 'endpoint 1', status: 'active' });
  t.is(res.body.created_at, res.body.updated_at);
  t.is(res.headers.get('location'), `/v1/webhooks/${res.body.id}`);
  t.deepEqual(Object.keys(res.body).sort(), ['created_at', 'description', 'disabled_at', 'disabled_reason', 'events', 'id', 'ordering', 'rate_limit', 'signature_scheme', 'signing_secret', 'status', 'updated_at', 'url']);
  t.is(res.body.signature_scheme, 'v1');

  // Read-your-writes: the projection already has it.
  const got = await c.get(`/v1/webhooks/${res.body.id}`);
  t.is(got.status, 200);
  const { signing_secret: _secret, ...shown } = res.body;
  t.deepEqual(got.body, shown);
  t.false(got.text.includes('whsec_'));
  const list = await c.get('/v1/webhooks');
  t.deepEqual(list.body.data.map((e: { id: string }) => e.id), [res.body.id]);
  t.false(list.text.includes('whsec_'));

  // description is optional and null when left out; duplicate patterns are kept once.
  const bare = await c.post('/v1/webhooks', { url: 'https://hooks.example.com/bare', events: ['*', '*'] });
  t.is(bare.status, 201);
  t.is(bare.body.description, null);
  t.deepEqual(bare.body.events, ['*']);
});

test('PATCH /v1/webhooks/:id changes url, events and description and answers the state after the write', async (t) => {
  const c = await as(t, 'tenant_patch');
  const { body: created } = await c.post('/v1/webhooks', endpointBody(2));
  const res = await c.patch(`/v1/webhooks/${created.id}`, { url: 'https://other.example.com/x', events: ['user.*'], description: null });
  t.is(res.status, 200);
  t.like(res.body, { id: created.id, url: 'https://other.example.com/x', events: ['user.*'], description: null, status: 'active', created_at: created.created_at });
  t.true(Date.parse(res.body.updated_at) >= Date.parse(created.updated_at));
  t.deepEqual((await c.get(`/v1/webhooks/${created.id}`)).body, res.body);
  // One field at a time leaves the others alone.
  const one = await c.patch(`/v1/webhooks/${created.id}`, { description: 'only this' });
  t.like(one.body, { url: 'https://other.example.com/x', events: ['user.*'], description: 'only this' });
});

test('every write answers the endpoint exactly as a GET shows it right after (the answer is the command\'s state, the GET the projection\'s row)', async (t) => {
  const c = await as(t, 'tenant_answers');
  const created = await c.post('/v1/webhooks', { ...endpointBody(3), description: 'every field', rate_limit: 7, ordering: 'key', signature_scheme: 'v1a' });
  t.is(created.status, 201, created.text);
  const id = String(created.body.id);
  const { signing_secret: _none, ...shown } = created.body;
  t.truthy(shown.signing_public_key);
  const writes: [string, () => Promise<{ status: number; body: Record<string, unknown> }>][] = [
    ['create', async () => ({ status: 201, body: shown })],
    ['patch', () => c.patch(`/v1/webhooks/${id}`, { rate_limit: null, description: null, ordering: 'none' })],
    ['delete', () => c.delete(`/v1/webhooks/${id}`)],
    ['restore', () => c.post(`/v1/webhooks/${id}/restore`, {})],
  ];
  for (const [what, write] of writes) {
    const res = await write();
    t.true(res.status >= 200 && res.status < 300, `${what}: ${res.status}`);
    t.deepEqual((await c.get(`/v1/webhooks/${id}`)).body, res.body, what);
  }
});

test('DELETE, then restore: deleted stays visible, 409 for the wrong state', async (t) => {
  const c = await as(t, 'tenant_delete');
  const { body: created } = await c.post('/v1/webhooks', endpointBody(3));
  const deleted = await c.delete(`/v1/webhooks/${created.id}`);
  t.is(deleted.status, 200);
  t.is(deleted.body.status, 'deleted');
  t.is((await c.get(`/v1/webhooks/${created.id}`)).body.status, 'deleted');
  t.is((await c.get('/v1/webhooks')).body.data[0].status, 'deleted');

  envelope(t, await c.delete(`/v1/webhooks/${created.id}`), 409, 'conflict');
  envelope(t, await c.patch(`/v1/webhooks/${created.id}`, { description: 'x' }), 409, 'conflict');

  const restored = await c.post(`/v1/webhooks/${created.id}/restore`);
  t.is(restored.status, 200);
  t.like(restored.body, { id: created.id, status: 'active', url: created.url });
  t.is((await c.get(`/v1/webhooks/${created.id}`)).body.status, 'active');
  envelope(t, await c.post(`/v1/webhooks/${created.id}/restore`), 409, 'conflict');
  // Restore takes no body, or an empty one.
  await c.delete(`/v1/webhooks/${created.id}`);
  envelope(t, await c.post(`/v1/webhooks/${created.id}/restore`, { force: true }), 422, 'validation_failed');
  t.is((await c.post(`/v1/webhooks/${created.id}/restore`, {})).status, 200);
});

test('POST /v1/webhooks/:id/rotate-secret returns a new secret once, with an optional grace period', async (t) => {
  const c = await as(t, 'tenant_rotate');
  const { body: created } = await c.post('/v1/webhooks', endpointBody(4));
  const res = await c.post(`/v1/webhooks/${created.id}/rotate-secret`);
  t.is(res.status, 200);
  t.deepEqual(Object.keys(res.body).sort(), ['id', 'signing_secret']);
  t.is(res.body.id, created.id);
  t.regex(res.body.signing_secret, /^whsec_/);
  t.not(res.body.signing_secret, created.signing_secret);
  for (const grace of [0, 1, 604800]) {
    t.is((await c.post(`/v1/webhooks/${created.id}/rotate-secret`, { grace_period_seconds: grace })).status, 200, `grace ${grace}`);
  }
  t.is((await c.post(`/v1/webhooks/${created.id}/rotate-secret`, {})).status, 200);
  for (const grace of [-1, 604801, 1.5, '60', null, true]) {
    const bad = await c.post(`/v1/webhooks/${created.id}/rotate-secret`, { grace_period_seconds: grace });
    envelope(t, bad, 422, 'validation_failed');
    t.deepEqual(bad.body.error.details.map((d: { field: string }) => d.field), ['grace_period_seconds']);
  }
  const unknown = await c.post(`/v1/webhooks/${created.id}/rotate-secret`, { grace: 10 });
  t.deepEqual(unknown.body.error.details, [{ field: 'grace', message: 'is not a known field' }]);
  // A deleted endpoint's secret can still be rotated (spec 3.2: from any state).
  await c.delete(`/v1/webhooks/${created.id}`);
  t.is((await c.post(`/v1/webhooks/${created.id}/rotate-secret`)).status, 200);
  // The endpoint itself never shows a secret.
  t.false((await c.get(`/v1/webhooks/${created.id}`)).text.includes('whsec_'));
});

test('GET /v1/event-types is the catalogue with its wildcards', async (t) => {
  const c = await as(t, 'tenant_catalogue');
  const res = await c.get('/v1/event-types');
  t.is(res.status, 200);
  t.deepEqual(res.body, describeCatalogue());
  t.true(res.body.wildcards.find((w: { pattern: string }) => w.pattern === 'organization.*').matches.includes('organization.auth_policy.updated'));
});

test('GET /v1/openapi.json serves the document', async (t) => {
  const c = await as(t, 'tenant_docs');
  const res = await c.get('/v1/openapi.json');
  t.is(res.status, 200);
  t.deepEqual(res.body, JSON.parse(JSON.stringify(OPENAPI_DOCUMENT)));
  t.is(res.body.openapi, '3.1.0');
});

test('two tenants never see or change each other\'s endpoints: 404 exactly like a missing id', async (t) => {
  const a = await as(t, 'tenant_a');
  const b = await as(t, 'tenant_b');
  const { body: mine } = await a.post('/v1/webhooks', endpointBody(5));
  const { body: theirs } = await b.post('/v1/webhooks', endpointBody(6));
  t.deepEqual((await a.get('/v1/webhooks')).body.data.map((e: { id: string }) => e.id), [mine.id]);
  t.deepEqual((await b.get('/v1/webhooks')).body.data.map((e: { id: string }) => e.id), [theirs.id]);

  const missing = 'webhook_00000000000000000000000000';
  const attempts: [string, string, unknown?][] = [
    ['GET', ''], ['PATCH', '', { description: 'pwned' }], ['DELETE', ''], ['POST', '/restore'], ['POST', '/rotate-secret'],
  ];
  for (const [method, suffix, json] of attempts) {
    const cross = await b.request(method, `/v1/webhooks/${mine.id}${suffix}`, { json });
    const none = await b.request(method, `/v1/webhooks/${missing}${suffix}`, { json });
    envelope(t, cross, 404, 'not_found');
    t.deepEqual(cross.body, JSON.parse(JSON.stringify(none.body).replaceAll(missing, mine.id)), `${method} ${suffix}`);
  }
  // A's endpoint is untouched, and a cursor from A's ids shows B nothing of A.
  const { signing_secret: _s, ...shown } = mine;
  t.deepEqual((await a.get(`/v1/webhooks/${mine.id}`)).body, shown);
  const page = await b.get(`/v1/webhooks?cursor=webhook_zzzzzzzzzzzzzzzzzzzzzzzzzz`);
  t.deepEqual(page.body.data.map((e: { id: string }) => e.id), [theirs.id]);
});

test('404: malformed ids, unknown ids and unknown routes', async (t) => {
  const c = await as(t, 'tenant_404');
  for (const id of ['nope', 'webhook_', 'WEBHOOK_abc', 'webhook_ABC', 'webhook_00000000000000000000000000', '%00', 'webhook_' + 'a'.repeat(65)]) {
    envelope(t, await c.get(`/v1/webhooks/${id}`), 404, 'not_found');
    envelope(t, await c.post(`/v1/webhooks/${id}/restore`), 404, 'not_found');
  }
  envelope(t, await c.get('/v1/nothing-here'), 404, 'not_found');
  envelope(t, await c.get('/v1/webhooks/x/y/z'), 404, 'not_found');
  envelope(t, await c.get('/V1/WEBHOOKS'), 404, 'not_found');
});

test('405 with Allow for a method a path does not support', async (t) => {
  const c = await as(t, 'tenant_405');
  const cases: [string, string, string[]][] = [
    ['PUT', '/v1/webhooks', ['GET', 'HEAD', 'POST']],
    ['DELETE', '/v1/webhooks', ['GET', 'HEAD', 'POST']],
    ['POST', '/v1/webhooks/webhook_00000000000000000000000000', ['DELETE', 'GET', 'HEAD', 'PATCH']],
    ['GET', '/v1/webhooks/webhook_00000000000000000000000000/restore', ['POST']],
    ['PATCH', '/v1/event-types', ['GET', 'HEAD']],
  ];
  for (const [method, path, allowed] of cases) {
    const res = await c.request(method, path);
    envelope(t, res, 405, 'method_not_allowed');
    t.deepEqual((res.headers.get('allow') ?? '').split(/,\s*/).sort(), allowed, `${method} ${path}`);
  }
});

test('400: malformed JSON and bad query strings', async (t) => {
  const c = await as(t, 'tenant_400');
  const json = { 'content-type': 'application/json' };
  for (const raw of ['{', '{"url": }', 'null x', '"just a string"', '42', '{"a":1}{"b":2}', '{"__proto__": {"x": 1}}']) {
    envelope(t, await c.request('POST', '/v1/webhooks', { raw, headers: json }), 400, 'bad_request');
  }
  for (const query of ['limit=0', 'limit=101', 'limit=abc', 'limit=', 'limit=-1', 'limit=1.5', 'limit=1&limit=2', 'limit=1e2', 'cursor=', 'cursor=abc', 'foo=1', 'cursor=webhook_a&cursor=webhook_b']) {
    const res = await c.get(`/v1/webhooks?${query}`);
    envelope(t, res, 400, 'bad_request');
    t.true(res.body.error.details.length > 0, query);
  }
  envelope(t, await c.get('/v1/event-types?x=1'), 400, 'bad_request');
  t.is((await c.get('/v1/webhooks?limit=100')).status, 200);
  t.is((await c.get('/v1/webhooks?limit=1')).status, 200);
});

test('413 for bodies over 64 KB, 415 for bodies that are not JSON', async (t) => {
  const c = await as(t, 'tenant_413');
  const big = { ...endpointBody(7), description: 'x'.repeat(64 * 1024) };
  envelope(t, await c.post('/v1/webhooks', big), 413, 'payload_too_large');
  // Chunked, so no content-length announces the size up front.
  const chunks = new ReadableStream({ start(ctl) { for (let i = 0; i < 70; i++) ctl.enqueue(new TextEncoder().encode(i === 0 ? '{"description":"' : 'y'.repeat(1024))); ctl.close(); } });
  const res = await fetch(`${base()}/v1/webhooks`, {
    method: 'POST', body: chunks, duplex: 'half',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${await newKey('tenant_413')}` },
  } as RequestInit);
  t.is(res.status, 413);
  t.is(((await res.json()) as { error: { code: string } }).error.code, 'payload_too_large');

  const body = JSON.stringify(endpointBody(8));
  for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml', 'multipart/form-data; boundary=x', 'application/json-patch+json']) {
    envelope(t, await c.request('POST', '/v1/webhooks', { raw: body, headers: { 'content-type': type } }), 415, 'unsupported_media_type');
  }
  // No content-type at all (fetch would add text/plain to a string, so send bytes).
  envelope(t, await c.request('POST', '/v1/webhooks', { raw: new TextEncoder().encode(body) }), 415, 'unsupported_media_type');
  envelope(t, await c.request('POST', '/v1/webhooks', { raw: body, headers: { 'content-type': 'application/json', 'content-encoding': 'compress' } }), 415, 'unsupported_media_type');
  // A body that does not match its content-encoding cannot be read.
  envelope(t, await c.request('POST', '/v1/webhooks', { raw: body, headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' } }), 400, 'bad_request');
  // application/json with a charset parameter is JSON.
  t.is((await c.request('POST', '/v1/webhooks', { raw: body, headers: { 'content-type': 'application/json; charset=utf-8' } })).status, 201);
});

test('rate_limit: an integer 1..10,000 on create and PATCH, shown on the endpoint; null clears it; anything else 422', async (t) => {
  const c = await as(t, 'tenant_rate_limit');
  const created = await c.post('/v1/webhooks', { ...endpointBody(3), rate_limit: 5 });
  t.is(created.status, 201);
  t.is(created.body.rate_limit, 5);
  t.is((await c.get(`/v1/webhooks/${created.body.id}`)).body.rate_limit, 5);
  const plain = await c.post('/v1/webhooks', endpointBody(4));
  t.is(plain.body.rate_limit, null, 'none by default');
  for (const bad of [0, 10_001, 1.5, 'x', -3, true, [5]]) {
    const res = await c.post('/v1/webhooks', { ...endpointBody(5), rate_limit: bad });
    envelope(t, res, 422, 'validation_failed');
    t.deepEqual(res.body.error.details.map((d: { field: string }) => d.field), ['rate_limit'], JSON.stringify(bad));
    const patched = await c.patch(`/v1/webhooks/${created.body.id}`, { rate_limit: bad });
    envelope(t, patched, 422, 'validation_failed');
  }
  t.is((await c.patch(`/v1/webhooks/${created.body.id}`, { rate_limit: 10_000 })).body.rate_limit, 10_000);
  t.is((await c.patch(`/v1/webhooks/${created.body.id}`, { description: 'other' })).body.rate_limit, 10_000, 'left alone by other changes');
  const cleared = await c.patch(`/v1/webhooks/${created.body.id}`, { rate_limit: null });
  t.is(cleared.status, 200);
  t.is(cleared.body.rate_limit, null);
  t.is((await c.get(`/v1/webhooks/${created.body.id}`)).body.rate_limit, null);
});

test('ordering: none by default, key on create and PATCH, shown on every read; anything else 422', async (t) => {
  const c = await as(t, 'tenant_ordering');
  const plain = await c.post('/v1/webhooks', endpointBody(6));
  t.is(plain.body.ordering, 'none');
  const created = await c.post('/v1/webhooks', { ...endpointBody(7), ordering: 'key' });
  t.is(created.status, 201);
  t.is(created.body.ordering, 'key');
  t.is((await c.get(`/v1/webhooks/${created.body.id}`)).body.ordering, 'key');
  for (const bad of ['KEY', 'fifo', null, 1, true]) {
    const res = await c.post('/v1/webhooks', { ...endpointBody(8), ordering: bad });
    envelope(t, res, 422, 'validation_failed');
    t.deepEqual(res.body.error.details.map((d: { field: string }) => d.field), ['ordering'], JSON.stringify(bad));
    envelope(t, await c.patch(`/v1/webhooks/${created.body.id}`, { ordering: bad }), 422, 'validation_failed');
  }
  t.is((await c.patch(`/v1/webhooks/${created.body.id}`, { description: 'other' })).body.ordering, 'key', 'left alone by other changes');
  t.is((await c.patch(`/v1/webhooks/${created.body.id}`, { ordering: 'none' })).body.ordering, 'none');
  // The list reads the projection: it shows the change once projected.
  await eventually(async () => {
    const list = await c.get('/v1/webhooks');
    return list.body.data.find((e: { id: string; ordering: string }) => e.id === created.body.id && e.ordering === 'none') ? true : undefined;
  }, 10_000, 'the projection to show ordering none');
});

test('422 names every field that fails validation, unknown fields included', async (t) => {
  const c = await as(t, 'tenant_422');
  const fields = async (json: unknown) => {
    const res = await c.post('/v1/webhooks', json);
    envelope(t, res, 422, 'validation_failed');
    return res.body.error.details.map((d: { field: string }) => d.field);
  };
  t.deepEqual(await fields({}), ['url', 'events']);
  t.deepEqual(await fields({ url: 'https://a.example.com', events: [] }), ['events']);
  t.deepEqual(await fields({ url: 'https://a.example.com', events: ['user.created', 'user.exploded', 'organizationInvitation.*'] }), ['events[1]', 'events[2]']);
  t.deepEqual(await fields({ url: 'https://a.example.com', events: 'user.created' }), ['events']);
  for (const url of ['http://a.example.com/hook', 'ftp://a.example.com', 'not a url', 'https://127.0.0.1/x', 'https://10.1.2.3/', 'https://192.168.0.1/',
    'https://169.254.169.254/latest/meta-data', 'https://[::1]/', 'https://[fd00:ec2::254]/', 'https://localhost/', 'https://user:pw@a.example.com/', 42]) {
    t.deepEqual(await fields({ url, events: ['*'] }), ['url'], String(url));
  }
  t.deepEqual(await fields({ url: 'https://a.example.com', events: ['*'], description: 'd'.repeat(1001) }), ['description']);
  t.deepEqual(await fields({ url: 'https://a.example.com', events: ['*'], description: 7 }), ['description']);
  t.deepEqual(await fields({ url: 'https://a.example.com', events: ['*'], secret: 'mine', tenant: 'other' }), ['secret', 'tenant']);
  t.deepEqual(await fields({ url: 'http://x', events: ['nope'], description: 'd'.repeat(1001), extra: 1 }), ['extra', 'url', 'events[0]', 'description']);
  t.deepEqual(await fields([1, 2]), ['body']);
  t.is((await c.post('/v1/webhooks', { url: 'https://a.example.com', events: ['*'], description: 'd'.repeat(1000) })).status, 201);

  const { body: created } = await c.post('/v1/webhooks', endpointBody(9));
  const patch = await c.patch(`/v1/webhooks/${created.id}`, { url: 'http://insecure.example.com', status: 'deleted' });
  envelope(t, patch, 422, 'validation_failed');
  t.deepEqual(patch.body.error.details.map((d: { field: string }) => d.field), ['status', 'url']);
  t.is((await c.get(`/v1/webhooks/${created.id}`)).body.url, created.url, 'nothing changed');
});

test('429 with retry-after once a key has spent its tokens; other keys are not affected', async (t) => {
  // A second app on the same database with a frozen clock: the bucket never refills, so the count is exact.
  let now = 1_000_000;
  const { app } = createApi({ publicUrl: () => 'http://127.0.0.1',
    orm: h.service.orm!, store: undefined as unknown as EndpointStore, waitForProjection: async () => {},
    checkUrl: (u) => checkTargetUrl(u, false), rateLimitPerSecond: 3, log: createLogger({ write: () => {} }), now: () => now, sealer: sealer(),
  });
  const server = await startApiServer(app, { host: '127.0.0.1', port: 0, log: createLogger({ write: () => {} }) });
  servers.push(server);
  const c = apiClient(server.url, await newKey('tenant_429'), t);
  for (let i = 0; i < 3; i++) t.is((await c.get('/v1/event-types')).status, 200);
  const limited = await c.get('/v1/event-types');
  envelope(t, limited, 429, 'rate_limited');
  t.is(limited.headers.get('retry-after'), '1');
  t.is((await apiClient(server.url, await newKey('tenant_429'), t).get('/v1/event-types')).status, 200, 'each key has its own bucket');
  now += 400; // 1.2 tokens back at 3/s
  t.is((await c.get('/v1/event-types')).status, 200);
  envelope(t, await c.get('/v1/event-types'), 429, 'rate_limited');
});

test('500 hides the failure from the caller and logs it with the request id', async (t) => {
  const lines: string[] = [];
  const log = createLogger({ write: (line) => lines.push(line) });
  const secret = 'whsec_c2VjcmV0LXRoYXQtbXVzdC1ub3QtbGVhaw==';
  const failing = { create: async () => { throw new Error(`database exploded near ${secret}`); } } as unknown as EndpointStore;
  const { app } = createApi({ publicUrl: () => 'http://127.0.0.1',
    orm: h.service.orm!, store: failing, waitForProjection: async () => {}, checkUrl: (u) => checkTargetUrl(u, false),
    rateLimitPerSecond: 100, log, sealer: sealer(),
  });
  const server = await startApiServer(app, { host: '127.0.0.1', port: 0, log: createLogger({ write: () => {} }) });
  servers.push(server);
  const res = await apiClient(server.url, await newKey('tenant_500'), t).post('/v1/webhooks', endpointBody(10));
  envelope(t, res, 500, 'internal_error');
  t.false(res.text.includes('whsec_'), 'no secret');
  t.false(res.text.includes('exploded'), 'no error message');
  t.false(/\bat .+:\d+:\d+/.test(res.text), 'no stack');
  const requestId = res.headers.get('x-request-id');
  const logged = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l['msg'] === 'request failed');
  t.truthy(logged);
  t.is(logged!['request_id'], requestId);
  t.is(logged!['level'], 'error');
  t.regex(String(logged!['stack']), /database exploded/);
});

test('routes answer HEAD for GET and OPTIONS with Allow', async (t) => {
  const c = await as(t, 'tenant_options');
  const head = await c.request('HEAD', '/v1/webhooks');
  t.is(head.status, 200);
  const options = await c.request('OPTIONS', '/v1/webhooks');
  t.is(options.status, 200);
  t.deepEqual((options.headers.get('allow') ?? '').split(/,\s*/).sort(), ['GET', 'HEAD', 'POST']);
});

/** An API on a database of its own, with no projector over it; the endpoint store is the harness's. */
async function apiWithoutProjector(t: ExecutionContext, label: string, waitForProjection: (seq: number) => Promise<void>, write: (line: string) => void = () => {}) {
  const db = await createTestDatabase(`api_${label}`);
  const orm = await openDatabase(db.url, silentLogger);
  t.teardown(async () => { await closeDatabase(orm); await db.drop(); });
  const { app } = createApi({ publicUrl: () => 'http://127.0.0.1',
    orm, store: h.store, checkUrl: (u) => checkTargetUrl(u, false), rateLimitPerSecond: 100, sealer: sealer(), waitForProjection, log: createLogger({ write }),
  });
  const server = await startApiServer(app, { host: '127.0.0.1', port: 0, log: silentLogger });
  servers.push(server);
  const key = (await createApiKey(orm.em.fork(), `tenant_${label}` as TenantId, 'test')).key;
  return { orm, client: apiClient(server.url, key, t) };
}

test('a write answers with no projector running, and the GET right after shows it: the command writes its row through', async (t) => {
  // A projector that never gets there: the answers below come from the rows the commands wrote.
  const { client } = await apiWithoutProjector(t, 'write_through', () => new Promise<void>(() => {}));
  const { status, body: made } = await client.post('/v1/webhooks', endpointBody(12));
  t.is(status, 201);
  t.deepEqual((await client.get(`/v1/webhooks/${made.id}`)).body, (({ signing_secret: _s, ...rest }) => rest)(made));
  const { body: patched } = await client.patch(`/v1/webhooks/${made.id}`, { description: 'written through' });
  t.is(patched.description, 'written through');
  t.deepEqual((await client.get(`/v1/webhooks/${made.id}`)).body, patched);
  t.deepEqual((await client.get('/v1/webhooks')).body.data, [patched]);
});

test('a write whose row cannot be written and whose event the projection has not reached in time still answers (the secret must not be lost)', async (t) => {
  const lines: string[] = [];
  const { orm, client } = await apiWithoutProjector(t, 'lag', async (seq) => { throw new ProjectionLagError('endpoints', seq, seq - 1, 5000); }, (l) => lines.push(l));
  const { body: made } = await client.post('/v1/webhooks', endpointBody(11));
  // From here on Postgres refuses every write of the row.
  await orm.em.fork().execute('drop table endpoints');
  const res = await client.post(`/v1/webhooks/${made.id}/rotate-secret`);
  t.is(res.status, 200);
  t.regex(res.body.signing_secret, /^whsec_/);
  t.not(res.body.signing_secret, made.signing_secret);
  const logged = lines.map((l) => JSON.parse(l) as { msg: string; error_code?: string });
  t.like(logged.find((l) => l.msg.startsWith('endpoint row not written through')), { error_code: '42P01' });
  t.true(logged.some((l) => l.msg.startsWith('projection lags')));
  t.false(lines.some((l) => l.includes(res.body.signing_secret) || l.includes('hooks.example.com')), 'neither the secret nor the URL is logged');
});

test('text the stores cannot hold is refused with 422 naming the field, and another tenant is listed at once', async (t) => {
  // Postgres refuses U+0000; before issue 23 this answered 201 and stopped the projection for every tenant.
  const c = await as(t, 'tenant_odd_text');
  const bad = ['a\u0000b', 'bell\u0007', 'escape\u001b[31m', 'lone \ud800 surrogate', 'cr\r\nlf', 'del\u007f'];
  for (const description of bad) {
    const res = await c.post('/v1/webhooks', { ...endpointBody(), description });
    envelope(t, res, 422, 'validation_failed');
    t.deepEqual(res.body.error.details.map((d: { field: string }) => d.field), ['description'], JSON.stringify(description));
  }
  const { body: ok } = await c.post('/v1/webhooks', { ...endpointBody(), description: 'two\nlines\tand a tab, ünïcödé 🙂' });
  t.is(ok.description, 'two\nlines\tand a tab, ünïcödé 🙂');
  const patched = await c.patch(`/v1/webhooks/${ok.id}`, { description: 'x\u0000' });
  envelope(t, patched, 422, 'validation_failed');
  // The read model goes on: another tenant's new endpoint is listed as soon as it is created.
  const other = await as(t, 'tenant_after_odd_text');
  const { body: created } = await other.post('/v1/webhooks', endpointBody(2));
  const until = Date.now() + 5000;
  let listed = false;
  while (!listed && Date.now() < until) {
    listed = (await other.get('/v1/webhooks')).body.data.some((e: { id: string }) => e.id === created.id);
    if (!listed) await new Promise((r) => setTimeout(r, 50));
  }
  t.true(listed, 'listed within 5 s');
});

test('Idempotency-Key: a retried create answers the first endpoint and its secret; another body is 409; each tenant has its own keys', async (t) => {
  const c = await as(t, 'tenant_idem');
  const key = { headers: { 'idempotency-key': 'create-7f3c2a' } };
  const first = await c.post('/v1/webhooks', endpointBody(31), key);
  t.is(first.status, 201);
  t.is(first.headers.get('idempotent-replayed'), null);
  const again = await c.post('/v1/webhooks', endpointBody(31), key);
  t.is(again.status, 201);
  t.is(again.headers.get('idempotent-replayed'), 'true');
  t.is(again.body.id, first.body.id);
  t.is(again.body.signing_secret, first.body.signing_secret, 'the secret shown once is shown again to the retry');
  t.is((await c.get('/v1/webhooks')).body.data.length, 1, 'one endpoint');
  envelope(t, await c.post('/v1/webhooks', endpointBody(32), key), 409, 'conflict');
  for (const bad of ['', 'has space', 'x'.repeat(256), 'ünï']) {
    envelope(t, await c.post('/v1/webhooks', endpointBody(33), { headers: { 'idempotency-key': bad } }), 400, 'bad_request');
  }
  const other = await as(t, 'tenant_idem_other');
  const theirs = await other.post('/v1/webhooks', endpointBody(31), key);
  t.is(theirs.status, 201);
  t.not(theirs.body.id, first.body.id);
  // Two tries at once: one endpoint, both answered with it.
  const both = await Promise.all([0, 1].map(() => c.post('/v1/webhooks', endpointBody(34), { headers: { 'idempotency-key': 'race-1' } })));
  t.deepEqual(both.map((r) => r.status), [201, 201]);
  t.is(both[0]!.body.id, both[1]!.body.id);
  t.is(both[0]!.body.signing_secret, both[1]!.body.signing_secret);
});

test('Idempotency-Key: a create whose write was stored but whose answer was lost is answered on retry, secret included', async (t) => {
  // The lost first try, as the API makes it: the key claims an id, the create is stored under it, no answer.
  const { claimEndpointId, requestHash } = await import('../src/api/idempotency.ts');
  const { createInput } = await import('../src/api/input.ts');
  const tenant = 'tenant_idem_lost' as TenantId;
  const body = endpointBody(41);
  const input = createInput(body, (u) => checkTargetUrl(u, false));
  const id = await claimEndpointId(h.service.orm!.em.fork(), tenant, 'lost-answer', requestHash(input));
  const stored = await h.store.create(tenant, input, { id });
  const c = await as(t, tenant);
  const retry = await c.post('/v1/webhooks', body, { headers: { 'idempotency-key': 'lost-answer' } });
  t.is(retry.status, 201);
  t.is(retry.body.id, id);
  t.is(retry.body.signing_secret, stored.signingSecret);
  t.is((await c.get('/v1/webhooks')).body.data.length, 1);
});
