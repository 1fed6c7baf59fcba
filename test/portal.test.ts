// The tenant portal (issue 19) in real Chromium against the real service: POST /v1/portal/sessions gives a
// single-use, short-lived link; the tenant adds an endpoint (the secret shown once, with a copy button, and
// real: a delivery verifies with it), rotates the secret, and sees no delivery history; the link's second
// use is refused; the session acts as its API key (another tenant's endpoint is not there, a revoked key
// ends it); forms need the session's CSRF token; only the configured origin may frame it.
import test, { type ExecutionContext } from 'ava';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { launchBrowser, type TestBrowser } from './helpers/browser.ts';
import { startTestService, tenantClient, type TestService } from './helpers/fixture.ts';
import { apiClient, type ApiClient } from './helpers/api-client.ts';
import { revokeApiKey, createApiKey } from '../src/apikeys/store.ts';
import type { TenantId } from '../src/domain/ids.ts';

let h: TestService;
let b: TestBrowser;
let api: ApiClient;
let framer: Server;
let framerOrigin = '';
let framedUrl = '';

test.before(async () => {
  // A page of "the platform's dashboard" that frames the portal link it is given.
  framer = createServer((_req, res) => res.writeHead(200, { 'content-type': 'text/html' }).end(`<iframe src="${framedUrl}" title="webhooks" width="900" height="700"></iframe>`));
  await new Promise<void>((r) => framer.listen(0, '127.0.0.1', () => r()));
  framerOrigin = `http://127.0.0.1:${(framer.address() as AddressInfo).port}`;
  h = await startTestService('portal', { PORTAL_FRAME_ANCESTORS: framerOrigin });
  b = await launchBrowser();
});

test.after.always(async () => {
  await b?.close();
  await h?.closeAll();
  framer?.close();
});

async function portalLink(t: ExecutionContext, client = api): Promise<string> {
  const res = await client.post('/v1/portal/sessions');
  t.is(res.status, 201);
  const expires = Date.parse(res.body.expires_at);
  t.true(expires > Date.now() && expires <= Date.now() + 5 * 60_000 + 1000, 'short-lived');
  return res.body.url as string;
}

test.serial('a tenant opens a portal link, adds an endpoint, sees the secret once, rotates it; a second use of the link is refused', async (t) => {
  api = await tenantClient(h, t, 'tenant_portal');
  const r = await h.receiver();
  const url = await portalLink(t);
  const { context, page } = await b.page();
  await context.grantPermissions(['clipboard-read', 'clipboard-write']);
  await page.goto(url);
  await page.getByRole('heading', { name: 'Endpoints' }).waitFor();
  t.is(new URL(page.url()).pathname, '/portal');

  await page.getByLabel('URL').fill(r.url);
  await page.getByLabel('user.*', { exact: true }).check();
  await page.getByRole('button', { name: 'Add endpoint' }).click();
  const secret = (await page.getByTestId('secret').textContent())!;
  t.regex(secret, /^whsec_/);
  await page.getByRole('button', { name: 'Copy' }).click();
  t.is(await page.evaluate<string>('navigator.clipboard.readText()'), secret, 'the copy button copies it');

  const listed = await api.get('/v1/webhooks');
  t.is(listed.body.data.length, 1);
  t.like(listed.body.data[0], { url: r.url, events: ['user.*'], status: 'active' });
  const id = listed.body.data[0].id as string;

  // The secret is the endpoint's: a delivery verifies with it.
  await h.publish('tenant_portal', 'user.created', { userId: 'user_7' });
  const [got] = await r.waitFor(1);
  t.deepEqual(new Webhook(secret).verify(got!.body, {
    'webhook-id': String(got!.headers['webhook-id']), 'webhook-timestamp': String(got!.headers['webhook-timestamp']),
    'webhook-signature': String(got!.headers['webhook-signature']),
  }), { type: 'user.created', data: { userId: 'user_7' } });

  await page.getByRole('link', { name: 'Endpoints' }).click();
  const listing = (await page.content());
  t.false(listing.includes(secret), 'shown once: not on the list');
  t.false(listing.includes('msg_'), 'no delivery history: no webhook ids');
  await page.getByRole('link', { name: id }).click();
  await page.getByRole('button', { name: 'Rotate secret' }).click();
  const rotated = (await page.getByTestId('secret').textContent())!;
  t.regex(rotated, /^whsec_/);
  t.not(rotated, secret);
  await page.getByRole('link', { name: 'Back to the endpoint' }).click();
  t.false((await page.content()).includes(rotated));
  t.false((await page.content()).includes(String(got!.headers['webhook-id'])));

  const again = await (await b.page()).page.goto(url);
  t.is(again!.status(), 410, 'a second use of the link is refused');
  await context.close();
});

test.serial('edit, delete and restore an endpoint from the portal; the API sees each change', async (t) => {
  const { endpoint } = await h.store.create('tenant_portal' as TenantId, { url: 'http://127.0.0.1:9/before', events: ['user.created'] });
  const { context, page } = await b.page();
  await page.goto(await portalLink(t));
  await page.getByRole('link', { name: endpoint.id }).click();
  await page.getByLabel('URL').fill('http://127.0.0.1:9/after');
  await page.getByLabel('organization.*', { exact: true }).check();
  await page.getByLabel('Ordering').selectOption('key');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByText('Saved.').waitFor();
  t.like((await api.get(`/v1/webhooks/${endpoint.id}`)).body, { url: 'http://127.0.0.1:9/after', events: ['organization.*', 'user.created'], ordering: 'key' });
  t.is(await page.getByLabel('Ordering').inputValue(), 'key', 'the form shows the setting');

  await page.getByRole('button', { name: 'Delete' }).click();
  await page.getByText('Deleted.').waitFor();
  t.is((await api.get(`/v1/webhooks/${endpoint.id}`)).body.status, 'deleted');
  await page.getByRole('button', { name: 'Restore' }).click();
  await page.getByText('Restored.').waitFor();
  t.is((await api.get(`/v1/webhooks/${endpoint.id}`)).body.status, 'active');

  await page.getByRole('link', { name: 'Event catalogue' }).click();
  await page.getByText('organizationInvitation.accepted').waitFor();
  t.pass();
  await context.close();
});

test.serial('the session acts as its API key: another tenant\'s endpoint is not there, bad input gets /v1\'s answer, a revoked key ends it', async (t) => {
  const other = await h.store.create('tenant_other' as TenantId, { url: 'http://127.0.0.1:9/other', events: ['*'] });
  const { key, id: keyId } = await createApiKey(h.service.orm!.em.fork(), 'tenant_portal' as TenantId, 'short-lived');
  const own = apiClient(h.service.api!.url, key, t);
  const { context, page } = await b.page();
  await page.goto(await portalLink(t, own));
  t.is((await page.goto(`${h.service.api!.url}/portal/endpoints/${other.endpoint.id}`))!.status(), 404);

  await page.goto(`${h.service.api!.url}/portal`);
  await page.getByLabel('URL').fill('https://user:pw@example.com/hook');
  await page.getByRole('button', { name: 'Add endpoint' }).click();
  await page.getByRole('alert').waitFor();
  const alert = (await page.getByRole('alert').textContent())!;
  t.regex(alert, /url/i);
  t.regex(alert, /events/i, 'every problem named, as /v1 does');

  const token = await page.locator('input[name=csrf]').first().getAttribute('value');
  const noToken = await context.request.post(`${h.service.api!.url}/portal/endpoints`, { form: { url: 'http://127.0.0.1:9/x', events: '*' } });
  t.is(noToken.status(), 403);
  const foreign = await context.request.post(`${h.service.api!.url}/portal/endpoints`, { form: { url: 'http://127.0.0.1:9/x', events: '*', csrf: token! }, headers: { Origin: 'http://evil.example' } });
  t.is(foreign.status(), 403);

  await revokeApiKey(h.service.orm!.em.fork(), keyId);
  t.is((await page.goto(`${h.service.api!.url}/portal`))!.status(), 401, 'the session ends with its key');
  await context.close();
});

test.serial('only the configured origin may frame the portal', async (t) => {
  framedUrl = await portalLink(t);
  const { context, page } = await b.page();
  await page.goto(framerOrigin);
  const frame = page.frameLocator('iframe');
  await frame.getByRole('heading', { name: 'Endpoints' }).waitFor();
  t.pass('framed by the allowed origin, it renders (its session cookie works in the frame)');

  const res = await page.request.get(`${h.service.api!.url}/portal/event-types`);
  t.regex(res.headers()['content-security-policy']!, new RegExp(`frame-ancestors ${framerOrigin}(;|$)`));
  t.notRegex(res.headers()['content-security-policy']!, /unsafe-inline/);
  t.is(res.headers()['x-frame-options'], undefined, 'X-Frame-Options cannot name an allow-list; the CSP does');

  // Any other page (here, about:blank's opaque origin) gets an empty frame.
  await page.goto('about:blank');
  await page.setContent(`<iframe src="${await portalLink(t)}" title="other"></iframe>`);
  const other = page.frames()[1]!;
  await other.waitForLoadState().catch(() => {});
  t.is(await other.getByRole('heading', { name: 'Endpoints' }).count(), 0);
  await context.close();
});
