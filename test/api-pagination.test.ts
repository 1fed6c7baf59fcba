// Cursor pagination of GET /v1/webhooks over 250 endpoints while other endpoints are being created:
// every endpoint that existed when paging began appears exactly once, newest first.
import test from 'ava';
import { startHarness, type Harness } from './helpers/service.ts';
import { apiClient, type ApiClient } from './helpers/api-client.ts';
import { createApiKey } from '../src/apikeys/store.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { createTenantLimitsStore, DEFAULTS_TENANT } from '../src/tenants/limits.ts';

let h: Harness;

test.before(async () => {
  h = await startHarness('api_pages', { HOOKSTREAM_ROLES: 'api,projector', HOOKSTREAM_RATE_LIMIT: '100000' });
  // Past the tenants' default quotas (endpoints, writes a second): this test is about something else.
  await createTenantLimitsStore(h.service.orm!).set(DEFAULTS_TENANT, { endpoints: 100_000, writesPerSecond: 100_000 }, 'test');
});
test.after.always(async () => {
  await h?.close();
});

const clientFor = async (t: Parameters<typeof apiClient>[2], tenant: string): Promise<ApiClient> =>
  apiClient(h.service.api!.url, (await createApiKey(h.service.orm!.em.fork(), tenant as TenantId)).key, t);

async function createMany(c: ApiClient, count: number, label: string, concurrency = 8): Promise<string[]> {
  const ids: string[] = [];
  let next = 0;
  await Promise.all(Array.from({ length: concurrency }, async () => {
    while (next < count) {
      const n = next++;
      const res = await c.post('/v1/webhooks', { url: `https://hooks.example.com/${label}/${n}`, events: ['*'] });
      if (res.status !== 201) throw new Error(`create ${label} ${n}: ${res.status} ${res.text}`);
      ids.push(res.body.id);
    }
  }));
  return ids;
}

test('pages over 250 endpoints with concurrent inserts miss and repeat nothing', async (t) => {
  const c = await clientFor(t, 'tenant_pages');
  const existing = await createMany(c, 250, 'before');
  // Another tenant's endpoints never show up in this tenant's pages.
  const other = await clientFor(t, 'tenant_pages_other');
  await createMany(other, 30, 'other');

  const seen: string[] = [];
  const insertedDuring: string[] = [];
  let cursor: string | null = null;
  let pages = 0;
  do {
    const query: string = cursor ? `?limit=7&cursor=${cursor}` : '?limit=7';
    // Each page is read while two more endpoints are being created.
    const [page, ...created] = await Promise.all([
      c.get(`/v1/webhooks${query}`),
      c.post('/v1/webhooks', { url: `https://hooks.example.com/during/${pages}a`, events: ['*'] }),
      c.post('/v1/webhooks', { url: `https://hooks.example.com/during/${pages}b`, events: ['*'] }),
    ]);
    t.is(page.status, 200);
    for (const r of created) insertedDuring.push(r.body.id);
    t.true(page.body.data.length <= 7);
    seen.push(...page.body.data.map((e: { id: string }) => e.id));
    t.is(page.body.has_more, page.body.next_cursor !== null);
    cursor = page.body.next_cursor;
    pages++;
  } while (cursor);

  t.is(new Set(seen).size, seen.length, 'no endpoint repeated');
  const missed = existing.filter((id) => !seen.includes(id));
  t.deepEqual(missed, [], 'no endpoint that existed before paging was missed');
  const foreign = seen.filter((id) => !existing.includes(id) && !insertedDuring.includes(id));
  t.deepEqual(foreign, [], "nothing of another tenant's");
  t.deepEqual(seen, [...seen].sort().reverse(), 'newest first');
  t.true(pages >= 36);

  // The first page now starts with what was inserted during the walk.
  t.true(insertedDuring.length <= 100);
  const first = await c.get(`/v1/webhooks?limit=${insertedDuring.length}`);
  t.deepEqual(first.body.data.map((e: { id: string }) => e.id), [...insertedDuring].sort().reverse());
  t.true(first.body.has_more);
});

test('limit defaults to 20; the last page has has_more false and next_cursor null', async (t) => {
  const c = await clientFor(t, 'tenant_pages_default');
  const ids = (await createMany(c, 25, 'default')).sort().reverse();
  const first = await c.get('/v1/webhooks');
  t.deepEqual(first.body.data.map((e: { id: string }) => e.id), ids.slice(0, 20));
  t.true(first.body.has_more);
  t.is(first.body.next_cursor, ids[19]);
  const second = await c.get(`/v1/webhooks?cursor=${first.body.next_cursor}`);
  t.deepEqual(second.body.data.map((e: { id: string }) => e.id), ids.slice(20));
  t.false(second.body.has_more);
  t.is(second.body.next_cursor, null);
  // Exactly a page's worth: no empty extra page.
  const exact = await c.get('/v1/webhooks?limit=25');
  t.is(exact.body.data.length, 25);
  t.false(exact.body.has_more);
  const empty = await (await clientFor(t, 'tenant_pages_empty')).get('/v1/webhooks');
  t.deepEqual(empty.body, { data: [], has_more: false, next_cursor: null });
});
