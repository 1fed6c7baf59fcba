// The tenant portal over plain HTTP (issue 19): its requests count against a per-key limit like /v1's
// (HOOKSTREAM_RATE_LIMIT, here 1 a second), a link is refused when it is malformed or unknown, and an
// address whose session cookies keep failing is refused before they are looked up.
import test from 'ava';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { createApiKey } from '../src/apikeys/store.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { newToken } from '../src/crypto/tokens.ts';
import { requestFrom } from './helpers/from-address.ts';

let h: TestService;

test.before(async () => {
  h = await startTestService('portal_limits', { HOOKSTREAM_ROLES: 'api,projector', HOOKSTREAM_RATE_LIMIT: '1' });
});

test.after.always(() => h?.closeAll());

test('portal requests are rate limited per API key; unknown and malformed links are refused', async (t) => {
  const api = h.service.api!.url;
  const { key } = await createApiKey(h.service.orm!.em.fork(), 'tenant_limits' as TenantId);
  const link = await (await fetch(`${api}/v1/portal/sessions`, { method: 'POST', headers: { authorization: `Bearer ${key}` } })).json() as { url: string };
  const start = await fetch(link.url, { redirect: 'manual' });
  t.is(start.status, 303);
  const cookie = start.headers.getSetCookie().map((c) => c.split(';')[0]!).find((c) => c.startsWith('hs_portal='))!;
  const statuses: number[] = [];
  for (let i = 0; i < 5; i++) {
    const res = await fetch(`${api}/portal/event-types`, { headers: { cookie } });
    statuses.push(res.status);
    if (res.status === 429) t.regex(res.headers.get('retry-after')!, /^\d+$/);
  }
  t.is(statuses[0], 200);
  t.true(statuses.includes(429), `statuses ${statuses.join(',')}`);

  for (const token of ['', 'short', 'A'.repeat(43), '../../etc/passwd']) {
    t.is((await fetch(`${api}/portal/start?token=${encodeURIComponent(token)}`, { redirect: 'manual' })).status, 410, token);
  }
  t.is((await fetch(`${api}/portal`, { redirect: 'manual' })).status, 401, 'no session, no page');
});

test('a flood of unknown session cookies from one address is refused there without lookups; a session from another address works', async (t) => {
  const api = h.service.api!.url;
  const statuses: number[] = [];
  while (statuses.length < 200 && statuses.at(-1) !== 429) {
    statuses.push((await requestFrom('127.0.0.2', `${api}/portal`, { headers: { cookie: `hs_portal=${newToken()}` } })).status);
  }
  // 20 at once, then one a second: how many more depends on how fast this machine sent them.
  t.deepEqual(statuses.slice(0, 20), Array(20).fill(401));
  t.is(statuses.at(-1), 429, statuses.join(','));
  const { key } = await createApiKey(h.service.orm!.em.fork(), 'tenant_portal_ok' as TenantId);
  const link = await (await fetch(`${api}/v1/portal/sessions`, { method: 'POST', headers: { authorization: `Bearer ${key}` } })).json() as { url: string };
  const start = await fetch(link.url, { redirect: 'manual' });
  t.is(start.status, 303);
  const cookie = start.headers.getSetCookie().map((c) => c.split(';')[0]!).find((c) => c.startsWith('hs_portal='))!;
  t.is((await fetch(`${api}/portal`, { headers: { cookie } })).status, 200);
});
