// What one tenant (or one anonymous client) can do to the others through the API, tried as an attacker
// would on the real service: its endpoints stop at its quota while another tenant still creates; a flood of
// refused writes (409) spends only its own writes a second and leaves no NATS consumer behind while another
// tenant's PATCHes answer 2xx; bad keys from one address (or of one key prefix) are refused (429) without a
// database lookup while a good key from another address works.
import test from 'ava';
import { jetstreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { startHarness, type Harness } from './helpers/service.ts';
import { apiClient, type ApiClient } from './helpers/api-client.ts';
import { requestFrom } from './helpers/from-address.ts';
import { createApiKey } from '../src/apikeys/store.ts';
import { createApi } from '../src/api/app.ts';
import { startApiServer } from '../src/api/server.ts';
import { SecretSealer } from '../src/crypto/sodium.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { silentLogger } from '../src/log.ts';
import { connectNats } from '../src/nats/connect.ts';
import { createTenantLimitsStore } from '../src/tenants/limits.ts';
import { ENDPOINTS_STREAM } from '../streams/endpoints.ts';

let h: Harness;
let nc: NatsConnection;

test.before(async () => {
  h = await startHarness('tenant_isolation', { HOOKSTREAM_ROLES: 'api,projector', HOOKSTREAM_RATE_LIMIT: '100000' });
  nc = await connectNats({ url: h.nats.url });
  // Before any write, so the service's first load of the limits already has them.
  const limits = createTenantLimitsStore(h.service.orm!);
  await limits.set('tenant_small' as TenantId, { endpoints: 3 }, 'test');
  await limits.set('tenant_flood' as TenantId, { writesPerSecond: 5 }, 'test');
});
test.after.always(async () => {
  await nc?.close();
  await h?.close();
});

const client = async (t: Parameters<typeof apiClient>[2], tenant: string): Promise<ApiClient> =>
  apiClient(h.service.api!.url, (await createApiKey(h.service.orm!.em.fork(), tenant as TenantId)).key, t);
const body = (n: number) => ({ url: `https://hooks.example.com/${n}`, events: ['user.*'] });
const hits = (limit: string) => h.service.metrics.tenantLimitHits.get({ limit });

test.serial('a tenant at its endpoints quota gets 422 naming the limit; another tenant still creates', async (t) => {
  const small = await client(t, 'tenant_small');
  const other = await client(t, 'tenant_other');
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const res = await small.post('/v1/webhooks', body(i));
    t.is(res.status, 201);
    ids.push(res.body.id);
  }
  const before = hits('endpoints');
  const refused = await small.post('/v1/webhooks', body(3));
  t.is(refused.status, 422);
  t.like(refused.body.error, { code: 'quota_exceeded', limit: 'endpoints' });
  t.is((await other.post('/v1/webhooks', body(4))).status, 201, 'another tenant is not affected');
  t.is(hits('endpoints'), before + 1, 'counted by limit');

  // A deleted endpoint frees its place; restoring it while the place is taken again is refused the same way.
  t.is((await small.delete(`/v1/webhooks/${ids[0]}`)).status, 200);
  t.is((await small.post('/v1/webhooks', body(5))).status, 201);
  const restore = await small.post(`/v1/webhooks/${ids[0]}/restore`);
  t.is(restore.status, 422);
  t.like(restore.body.error, { code: 'quota_exceeded', limit: 'endpoints' });
  t.is((await small.post(`/v1/webhooks/${ids[1]}/restore`)).status, 409, 'restoring an active endpoint adds none: the usual 409');
});

test.serial('a flood of refused restores spends only its tenant\'s writes, leaves no consumer, and another tenant\'s PATCHes answer 2xx', async (t) => {
  const flood = await client(t, 'tenant_flood');
  const victim = await client(t, 'tenant_victim');
  const target = (await flood.post('/v1/webhooks', body(10))).body.id as string;
  const own = (await victim.post('/v1/webhooks', body(11))).body.id as string;
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  const consumers = async () => (await jsm.streams.info(ENDPOINTS_STREAM)).state.consumer_count;
  const before = await consumers();

  const statuses = new Map<string, number>();
  let stop = false;
  const attacker = Promise.all(Array.from({ length: 8 }, async () => {
    while (!stop) {
      // Already active: every restore that gets through is a 409.
      const res = await flood.post(`/v1/webhooks/${target}/restore`);
      const k = `${res.status} ${res.body.error?.code}${res.body.error?.limit ? ` ${res.body.error.limit}` : ''}`;
      statuses.set(k, (statuses.get(k) ?? 0) + 1);
      if (res.status === 429) t.regex(res.headers.get('retry-after') ?? '', /^\d+$/);
    }
  }));
  const victimStatuses: number[] = [];
  for (let i = 0; i < 20; i++) victimStatuses.push((await victim.patch(`/v1/webhooks/${own}`, { description: `change ${i}` })).status);
  stop = true;
  await attacker;

  t.deepEqual(victimStatuses, Array(20).fill(200), 'every PATCH of the other tenant answered 200');
  t.true((statuses.get('429 quota_exceeded writes_per_second') ?? 0) > 0, JSON.stringify([...statuses]));
  t.deepEqual([...statuses.keys()].sort(), ['409 conflict', '429 quota_exceeded writes_per_second'], JSON.stringify([...statuses]));
  t.true(await consumers() <= before, 'no consumer left behind on ENDPOINTS');
});

test.serial("a client looping on its tenant's writes-a-second 429s without waiting gets them held until their retry-after", async (t) => {
  const flood = await client(t, 'tenant_flood');
  const target = (await flood.post('/v1/webhooks', body(12))).body.id as string;
  // One connection, one request at a time, never waiting: unheld, its 429s would come back in a few ms each.
  const statuses = new Map<number, number>();
  const until = Date.now() + 3000;
  let requests = 0;
  while (Date.now() < until) {
    const res = await flood.post(`/v1/webhooks/${target}/restore`);
    statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    requests++;
  }
  t.log(`${requests} requests in 3 s: ${JSON.stringify([...statuses])}`);
  t.true((statuses.get(429) ?? 0) > 0);
  // About one refusal a second, besides the writes it is let make (5 a second).
  t.true(requests <= 40, `${requests} requests in 3 s`);
  // One that waits its retry-after is answered at once, and is let write again.
  await new Promise((r) => setTimeout(r, 1100));
  const started = Date.now();
  t.is((await flood.post(`/v1/webhooks/${target}/restore`)).status, 409);
  t.true(Date.now() - started < 900, 'not held');
});

test.serial("the portal answers as /v1 does: 422 at the endpoints quota, 429 with retry-after over the writes a second", async (t) => {
  const api = h.service.api!.url;
  const portalOf = async (tenant: string) => {
    const { key } = await createApiKey(h.service.orm!.em.fork(), tenant as TenantId);
    const link = await (await fetch(`${api}/v1/portal/sessions`, { method: 'POST', headers: { authorization: `Bearer ${key}` } })).json() as { url: string };
    const start = await fetch(link.url, { redirect: 'manual' });
    const cookie = start.headers.getSetCookie().map((c) => c.split(';')[0]!).find((c) => c.startsWith('hs_portal='))!;
    const csrf = /name="csrf" value="([^"]+)"/.exec(await (await fetch(`${api}/portal`, { headers: { cookie } })).text())![1]!;
    return (path: string, fields: Record<string, string>) => fetch(`${api}${path}`, {
      method: 'POST', redirect: 'manual', headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ csrf, ...fields }).toString(),
    });
  };
  // tenant_small is at its 3 endpoints (the first test).
  const small = await portalOf('tenant_small');
  const full = await small('/portal/endpoints', { url: 'https://hooks.example.com/portal', events: 'user.*' });
  t.is(full.status, 422);
  t.regex(await full.text(), /this tenant has its 3 endpoints/);

  const flood = await portalOf('tenant_flood');
  // Its writes a second may still be spent by the test before: as soon as it is let.
  const floodApi = await client(t, 'tenant_flood');
  let created = await floodApi.post('/v1/webhooks', body(20));
  while (created.status === 429) {
    await new Promise((r) => setTimeout(r, 1000));
    created = await floodApi.post('/v1/webhooks', body(20));
  }
  t.is(created.status, 201, created.text);
  const id = created.body.id as string;
  const statuses: number[] = [];
  for (let i = 0; i < 10 && !statuses.includes(429); i++) {
    const res = await flood(`/portal/endpoints/${id}`, { url: `https://hooks.example.com/p${i}`, events: 'user.*' });
    statuses.push(res.status);
    if (res.status === 429) {
      t.regex(res.headers.get('retry-after') ?? '', /^\d+$/);
      t.regex(await res.text(), /endpoint writes a second/);
    }
  }
  t.true(statuses.includes(429), statuses.join(','));
  // Restore and delete are refused the same way, not answered 500.
  let res = await flood(`/portal/endpoints/${id}/delete`, {});
  while (res.status === 200) res = await flood(`/portal/endpoints/${id}/restore`, {});
  t.true(res.status === 429 || res.status === 409, String(res.status));
});

test.serial('bad keys from one address, and a good key over its rate, are refused with 429 before any lookup; a good key from another address works', async (t) => {
  // An API of its own whose database lookups are counted: what answers 429 did not look anything up.
  let lookups = 0;
  const real = h.service.orm!;
  const orm = { em: { fork: () => {
    const em = real.em.fork();
    const execute = em.execute.bind(em);
    em.execute = ((...args: Parameters<typeof execute>) => { lookups++; return execute(...args); }) as typeof em.execute;
    return em;
  } } } as unknown as typeof real;
  // And the requests that reached Koa at all: a refused flood is answered before it (api/early.ts).
  let reachedKoa = 0;
  const { app, refuseEarly } = createApi({ publicUrl: () => 'http://127.0.0.1',
    orm, store: h.store, waitForProjection: async () => {}, checkUrl: () => undefined, rateLimitPerSecond: 1000,
    authFailureBurst: 5, log: silentLogger, sealer: new SecretSealer(h.keys.masterKey), now: () => 1_000_000, // no refill: exact counts
  });
  app.middleware.unshift(async (_ctx, next) => { reachedKoa++; await next(); });
  const server = await startApiServer(app, { host: '127.0.0.1', port: 0, log: silentLogger, refuseEarly });
  t.teardown(() => server.close());
  const good = (await createApiKey(real.em.fork(), 'tenant_good' as TenantId)).key;
  const bad = (i: number) => ({ authorization: `Bearer hs_live_${String(i).padStart(43, 'x')}` });
  const get = (from: string, headers: Record<string, string>) => requestFrom(from, `${server.url}/v1/webhooks`, { headers });

  const statuses: number[] = [];
  for (let i = 0; i < 5; i++) statuses.push((await get('127.0.0.2', bad(i))).status);
  t.is(lookups, 5);
  for (let i = 5; i < 50; i++) statuses.push((await get('127.0.0.2', bad(i))).status);
  t.deepEqual(statuses, [...Array(5).fill(401), ...Array(45).fill(429)]);
  t.is(lookups, 5, 'the refused ones looked nothing up');
  t.is(reachedKoa, 5, 'nor reached Koa');
  const throttled = await get('127.0.0.2', bad(99));
  t.deepEqual(JSON.parse(throttled.body), { error: { code: 'rate_limited', message: 'too many failed authentications from this address or for this key; retry in 1 s', details: [] } });
  t.is(throttled.headers['retry-after'], '1');
  t.is(throttled.headers['content-type'], 'application/json; charset=utf-8');
  t.regex(String(throttled.headers['x-request-id']), /^req_[0-9a-z]{26}$/);
  t.is((await get('127.0.0.2', { ...bad(98), 'x-request-id': 'caller-id.1' })).headers['x-request-id'], 'caller-id.1', "the caller's request id is kept");
  const head = await requestFrom('127.0.0.2', `${server.url}/v1/webhooks`, { method: 'HEAD', headers: bad(97) });
  t.is(head.status, 429);
  t.is(head.body, '', 'HEAD: no body');
  t.is((await get('127.0.0.2', {})).status, 429, 'no credential at all: the source is throttled too');
  t.is(reachedKoa, 5);

  t.is((await get('127.0.0.1', { authorization: `Bearer ${good}` })).status, 200, 'a good key from another address works');
  t.is((await get('127.0.0.3', bad(100))).status, 429, 'the same key prefix from another address is refused too');
  t.is((await get('127.0.0.3', { authorization: `Bearer hs_live_${'y'.repeat(43)}` })).status, 401, 'another prefix from another address is looked up');
  t.is(lookups, 7);

  // A good key over its request rate is refused before its lookup too.
  const slow = createApi({ publicUrl: () => 'http://127.0.0.1',
    orm, store: h.store, waitForProjection: async () => {}, checkUrl: () => undefined, rateLimitPerSecond: 2,
    log: silentLogger, sealer: new SecretSealer(h.keys.masterKey), now: () => 1_000_000,
  });
  let slowReachedKoa = 0;
  slow.app.middleware.unshift(async (_ctx, next) => { slowReachedKoa++; await next(); });
  const slowServer = await startApiServer(slow.app, { host: '127.0.0.1', port: 0, log: silentLogger, refuseEarly: slow.refuseEarly });
  t.teardown(() => slowServer.close());
  const rates: number[] = [];
  for (let i = 0; i < 5; i++) rates.push((await requestFrom('127.0.0.1', `${slowServer.url}/v1/webhooks`, { headers: { authorization: `Bearer ${good}` } })).status);
  t.deepEqual(rates, [200, 200, 429, 429, 429]);
  t.is(lookups, 9, 'two lookups: the refused requests made none');
  // Those over the rate were refused before Koa.
  t.is(slowReachedKoa, 2);
  const over = await requestFrom('127.0.0.1', `${slowServer.url}/v1/webhooks`, { headers: { authorization: `Bearer ${good}` } });
  t.deepEqual(JSON.parse(over.body), { error: { code: 'rate_limited', message: 'too many requests for this API key; retry in 1 s', details: [] } });
  t.is(over.headers['retry-after'], '1');
  t.is(slowReachedKoa, 2);
});
