// The operator console (issue 19) in real Chromium against the real service, NATS and Postgres: sign in
// with an operator key, find a dead letter by its webhook-id, open it, replay it (the receiver gets it with
// the same webhook-id), see the audit entry; payloads with markup never run; a bad key, a post without the
// session's CSRF token and a post from another origin are refused; pages cannot be framed; sign-in is
// rate limited.
import test from 'ava';
import type { BrowserContext, Page } from 'playwright-core';
import { launchBrowser, type TestBrowser } from './helpers/browser.ts';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { DeadLetterOut } from '../src/admin/protocol.ts';
import { createOperator, revokeOperator } from '../src/operators/store.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { requestFrom } from './helpers/from-address.ts';

const MARKUP = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2; alert(2)">';

let h: TestService;
let b: TestBrowser;
let admin: AdminClient;
let url = '';
let key = '';
let receiver: Receiver;
let healthy = false;
let endpointId = '';
let letter: DeadLetterOut;
let bulkEndpointId = '';

test.before(async () => {
  h = await startTestService('console', { HOOKSTREAM_RETRY_SCHEDULE: '200ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '2s' });
  url = h.service.console!.url;
  ({ admin } = await h.operator());
  ({ key } = await createOperator(h.service.orm!.em.fork(), 'alice'));
  receiver = await h.receiver(() => (healthy ? 204 : 500));
  const { endpoint } = await h.store.create('tenant_console' as TenantId, { url: receiver.url, events: ['user.*'] });
  endpointId = endpoint.id;
  await h.publish('tenant_console', 'user.created', { userId: 'user_1', name: MARKUP });
  letter = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint: endpointId });
    return page.data.length === 1 ? page.data[0] : undefined;
  }, 30_000, 'a dead letter');
  // A second endpoint whose receiver always fails: two dead letters for "Replay all matching".
  const down = await h.receiver(() => 500);
  bulkEndpointId = (await h.store.create('tenant_console' as TenantId, { url: down.url, events: ['organization.*'] })).endpoint.id;
  for (const id of ['org_1', 'org_2']) await h.publish('tenant_console', 'organization.created', { organizationId: id });
  await eventually(async () => ((await admin.listDeadLetters({ endpoint: bulkEndpointId })).data.length === 2 ? true : undefined), 30_000, 'two dead letters');
  b = await launchBrowser();
});

test.after.always(async () => {
  await b?.close();
  await h?.closeAll();
});

/** A fresh browser context whose page counts every dialog (an alert from a payload would be one). */
async function freshPage(): Promise<{ context: BrowserContext; page: Page; dialogs: string[] }> {
  const { context, page } = await b.page();
  const dialogs: string[] = [];
  page.on('dialog', (d) => { dialogs.push(d.message()); void d.dismiss(); });
  return { context, page, dialogs };
}

async function signIn(page: Page, withKey = key): Promise<void> {
  await page.goto(`${url}/`);
  await page.getByLabel('Operator key').fill(withKey);
  await page.getByRole('button', { name: 'Sign in' }).click();
}

// Strings, not functions: the project's TypeScript has no DOM types.
const pwned = (page: Page) => page.evaluate<unknown>('window.__pwned');
const focused = (page: Page, what: 'id' | 'textContent') => page.evaluate<unknown>(`document.activeElement && document.activeElement.${what}`);

test.serial('an unknown key is refused and makes no session', async (t) => {
  const { context, page } = await freshPage();
  await signIn(page, 'hs_op_' + 'A'.repeat(43));
  await page.getByText('Unknown or revoked operator key.').waitFor();
  t.is(new URL(page.url()).pathname, '/sign-in');
  t.false((await context.cookies()).some((c) => c.name === 'hs_console_session'));
  await page.goto(`${url}/dead-letters`);
  t.is(new URL(page.url()).pathname, '/sign-in', 'pages send the signed-out to the sign-in page');
  await context.close();
});

test.serial('sign in, find a dead letter by its webhook-id, open it (markup stays text), replay it, see the audit entry', async (t) => {
  const { context, page, dialogs } = await freshPage();
  await signIn(page);
  await page.getByRole('heading', { name: 'Overview' }).waitFor();

  const session = (await context.cookies()).find((c) => c.name === 'hs_console_session');
  t.truthy(session);
  t.true(session!.httpOnly);
  t.is(session!.sameSite, 'Strict');
  t.true(session!.expires > Date.now() / 1000 && session!.expires < Date.now() / 1000 + 9 * 3600, 'it expires');

  await page.getByRole('link', { name: 'Dead letters', exact: true }).click();
  await page.getByLabel('Webhook id').fill(letter.webhook_id);
  await page.getByRole('button', { name: 'Filter' }).click();
  await page.getByRole('link', { name: letter.webhook_id }).click();
  await page.getByRole('heading', { name: `Dead letter ${letter.id}` }).waitFor();
  await page.getByRole('button', { name: 'Open' }).click();
  await page.getByRole('heading', { name: `Dead letter ${letter.webhook_id}` }).waitFor();
  const payload = await page.getByTestId('payload').textContent();
  t.true(payload!.includes(JSON.stringify(MARKUP)), 'the payload is shown as the (JSON) text it is');
  t.is(await page.locator('main img').count(), 0, 'no element was made from it');
  t.regex((await page.locator('main dl').textContent())!, /Authentication tag\s*valid/);
  t.is(await pwned(page), undefined, 'no script of the payload ran');
  t.deepEqual(dialogs, []);
  t.like((await admin.listAudit({ action: 'dead_letter.show', target: letter.id })).data[0], { operator: 'alice', outcome: 'ok' });

  healthy = true;
  await page.getByRole('button', { name: 'Replay' }).click();
  await page.getByText('Replayed (replay 1).').waitFor();
  const got = (await receiver.waitFor(2))[1]!;
  t.is(got.headers['webhook-id'], letter.webhook_id, 'the receiver gets it with the same webhook-id');
  t.true(got.body.includes('"name"'));

  await page.getByRole('link', { name: 'Audit log', exact: true }).click();
  const row = page.locator('tr', { hasText: 'dead_letter.replay' }).first();
  await row.waitFor();
  t.regex((await row.textContent())!, new RegExp(`alice\\s*dead_letter\\.replay\\s*${letter.id}\\s*ok`));
  t.is(await pwned(page), undefined);
  await context.close();
});

test.serial('every page is one link away and shows what the issue lists; the delivery shows its attempts', async (t) => {
  const { context, page, dialogs } = await freshPage();
  await signIn(page);
  const overview = (await page.locator('main').textContent())!;
  t.regex(overview, /Endpoints by status[\s\S]*active\s*2/);
  t.regex(overview, /Dead letters: [1-9]/);
  t.regex(overview, /Latest operational events[\s\S]*message\.attempt\.exhausted/);
  for (const name of ['Overview', 'Dead letters', 'Deliveries', 'Endpoints', 'Rejected events', 'Audit log']) {
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name, exact: true }).click();
    await page.getByRole('heading', { level: 1, name }).waitFor();
  }
  // The delivery log, searched as a person would: by tenant, user and status; the row opens its attempts.
  await page.getByRole('link', { name: 'Deliveries', exact: true }).click();
  await page.getByLabel('Tenant').fill('tenant_console');
  await page.getByLabel('User id').fill('user_1');
  await page.getByLabel('Status').selectOption('ok');
  await page.getByRole('button', { name: 'Search' }).click();
  const rows = page.locator('table tbody tr');
  // The replay's 2xx reaches the log within moments: searched again (the same URL) until it has.
  await eventually(async () => ((await rows.count()) > 0 ? true : await page.reload().then(() => undefined)), 20_000, 'the delivered row');
  t.is(await rows.count(), 1, 'user_1 has one delivery');
  t.regex((await rows.first().textContent())!, new RegExp(`ok\\s*${letter.webhook_id}\\s*${endpointId}\\s*tenant_console\\s*user\\.created\\s*\\d+\\s*204`));
  await rows.first().getByRole('link', { name: `Attempts of ${letter.webhook_id} to ${endpointId}` }).click();
  await page.getByRole('heading', { name: 'acknowledged' }).waitFor();
  const attempts = page.locator('table tbody tr');
  const n = await attempts.count();
  t.true(n >= 3, 'two failed attempts, then the 2xx');
  t.regex((await attempts.nth(0).textContent())!, /failed\s*500.*HTTP 500\s*nope/s);
  t.regex((await attempts.nth(n - 1).textContent())!, /ok\s*204/);

  await page.getByRole('link', { name: 'Endpoints', exact: true }).click();
  const row = page.locator('tr', { hasText: endpointId });
  t.regex((await row.textContent())!, /tenant_console.*active/s);
  await row.getByRole('button', { name: /Retry now/ }).click();
  await page.getByText(/Retry now: \d+ waiting deliver(y|ies) of /).waitFor();
  t.like((await admin.listAudit({ action: 'endpoint.retry_now' })).data[0], { operator: 'alice', target: endpointId });

  // A rejected event whose subject and body are markup: listed and opened as text.
  const body = `{"x": ${JSON.stringify(MARKUP)}, unfinished`;
  await h.publishRaw('tenant_console', 'user.<img/src=x/onerror=alert(1)>', body);
  const rejected = await eventually(async () => (await admin.listRejectedEvents({ tenant: 'tenant_console' })).data[0], 20_000, 'a rejected event');
  await page.getByRole('link', { name: 'Rejected events', exact: true }).click();
  await page.getByRole('link', { name: `Show body of rejected event ${rejected.seq}` }).click();
  await page.getByRole('button', { name: 'Open' }).click();
  t.is(await page.getByTestId('payload').textContent(), body);
  t.true((await page.locator('main').textContent())!.includes('user.<img/src=x/onerror=alert(1)>'), 'the subject too is text');
  t.is(await page.locator('main img').count(), 0);
  t.is(await pwned(page), undefined);
  t.deepEqual(dialogs, []);
  t.like((await admin.listAudit({ action: 'rejected_event.show' })).data[0], { operator: 'alice', target: String(rejected.seq) });
  await context.close();
});

test.serial('the overview puts the failing endpoints first and charts a day of deliveries; the endpoint page does the same for one', async (t) => {
  const { context, page, dialogs } = await freshPage();
  await signIn(page);
  // Both endpoints failed in the last hour: the one that never succeeded (0 %) above the one that recovered.
  const failing = page.locator('section[aria-labelledby="h-failing"] tbody tr');
  await eventually(async () => {
    await page.goto(`${url}/`);
    return (await failing.count()) === 2 ? true : undefined;
  }, 20_000, 'two failing endpoints on the overview');
  t.regex((await failing.nth(0).textContent())!, new RegExp(`${bulkEndpointId}\\s*tenant_console.*?\\s0 %\\s*[4-9]`, 's'));
  t.regex((await failing.nth(1).textContent())!, new RegExp(`${endpointId}\\s*tenant_console.*?\\s[1-9]\\d?(\\.\\d)? %`, 's'));
  const chart = page.getByRole('img', { name: 'Deliveries per minute, last 24 hours' });
  t.true(Number(await chart.getAttribute('data-ok')) >= 1 && Number(await chart.getAttribute('data-failed')) >= 6, 'the chart counts every attempt');
  t.true((await chart.locator('path.failed').getAttribute('d'))!.startsWith('M'), 'failed attempts drawn');

  await failing.nth(0).getByRole('link', { name: bulkEndpointId }).click();
  await page.getByRole('heading', { level: 1, name: `Endpoint ${bulkEndpointId}` }).waitFor();
  const main = (await page.locator('main').textContent())!;
  t.regex(main, /Last hour\s*(\d+)\s*0\s*\1\s*0 %/);
  t.regex(main, /Last error.*HTTP 500/s);
  const own = page.getByRole('img', { name: 'Deliveries per minute, last 24 hours' });
  t.true(Number(await own.getAttribute('data-failed')) >= 4, 'two dead letters, two attempts each');
  t.is(await page.locator('section[aria-labelledby="h-recent"] tbody tr').count(), 2, 'its two deliveries');
  t.deepEqual(dialogs, []);
  await context.close();
});

test.serial('an operator disables an endpoint with a reason and enables it again from its page; both are audited', async (t) => {
  const { context, page } = await freshPage();
  await signIn(page);
  await page.getByRole('link', { name: 'Endpoints', exact: true }).click();
  await page.getByRole('link', { name: bulkEndpointId }).click();
  await page.getByLabel('Reason').fill('receiver down for maintenance');
  await page.getByRole('button', { name: 'Disable' }).click();
  await page.getByText('Disabled.').waitFor();
  t.regex((await page.getByTestId('state').textContent())!, /^disabled \(operator since \S+\) by alice: receiver down for maintenance$/);
  t.like((await admin.listAudit({ action: 'endpoint.disable' })).data[0], { operator: 'alice', target: bulkEndpointId, outcome: 'ok', detail: 'receiver down for maintenance' });
  t.like(await h.store.get('tenant_console' as TenantId, bulkEndpointId as never), { status: 'disabled', disabledReason: 'operator' });
  t.is(await page.getByRole('button', { name: 'Disable' }).count(), 0, 'no Disable on a disabled endpoint');

  await page.getByRole('button', { name: 'Enable' }).click();
  await page.getByText('Enabled: deliveries resume.').waitFor();
  t.notRegex((await page.getByTestId('state').textContent())!, /disabled/);
  t.like((await admin.listAudit({ action: 'endpoint.enable' })).data[0], { operator: 'alice', target: bulkEndpointId, outcome: 'ok' });
  t.like(await h.store.get('tenant_console' as TenantId, bulkEndpointId as never), { status: 'active', disabledReason: null });
  await context.close();
});

test.serial('markup in a query comes back in the error as text', async (t) => {
  const { context, page, dialogs } = await freshPage();
  await signIn(page);
  const res = await page.goto(`${url}/dead-letters?webhook_id=${encodeURIComponent(MARKUP)}`);
  t.is(res!.status(), 400);
  t.true((await page.getByRole('alert').textContent())!.includes(JSON.stringify(MARKUP)));
  t.is(await page.getByLabel('Webhook id').inputValue(), MARKUP, 'the field holds it as its value');
  t.is(await page.locator('main img').count(), 0);
  t.is(await pwned(page), undefined);
  t.deepEqual(dialogs, []);
  await context.close();
});

test.serial('"Replay all matching" says how many match first, and replays them once confirmed', async (t) => {
  const { context, page } = await freshPage();
  await signIn(page);
  await page.getByRole('link', { name: 'Dead letters', exact: true }).click();
  await page.getByLabel('Endpoint').fill(bulkEndpointId);
  await page.getByRole('button', { name: 'Filter' }).click();
  await page.getByRole('button', { name: 'Replay all matching' }).or(page.getByRole('link', { name: 'Replay all matching' })).click();
  t.regex((await page.getByTestId('dry-run').textContent())!, /^2 dead letters match \(endpoint webhook_/);
  t.is((await admin.listDeadLetters({ endpoint: bulkEndpointId, status: 'dead' })).data.length, 2, 'the dry run replayed nothing');
  await page.getByRole('button', { name: 'Replay 2 dead letters' }).click();
  await page.getByText('Replayed 2; 0 could not be replayed.').waitFor();
  // Each replayed once (the receiver still fails, so they may have died again since).
  t.deepEqual((await admin.listDeadLetters({ endpoint: bulkEndpointId })).data.map((d) => d.replay_count), [1, 1]);
  const audit = (await admin.listAudit({ action: 'dead_letters.replay_many', target: `endpoint=${bulkEndpointId}` })).data;
  t.deepEqual(audit.map((e) => [e.operator, e.detail]), [['alice', 'replayed 2, failed 0 (of 2 matching)'], ['alice', 'dry run: 2 matching']]);
  await context.close();
});

test.serial('a post without the CSRF token, or from another origin, is refused and changes nothing', async (t) => {
  const { context, page } = await freshPage();
  await signIn(page);
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  const before = (await admin.listDeadLetters({ endpoint: endpointId })).data[0]!.replay_count;

  const noToken = await context.request.post(`${url}/dead-letters/${letter.id}/replay`, { form: { force: '1' }, maxRedirects: 0 });
  t.is(noToken.status(), 403);
  // Opening a payload (audited) is a form post too: a same-site GET, or a post without the token, opens nothing.
  const shows = async () => (await admin.listAudit({ action: 'dead_letter.show', target: letter.id })).data.length;
  const shownBefore = await shows();
  const viaGet = await context.request.get(`${url}/dead-letters/${letter.id}`, { maxRedirects: 0 });
  t.is(viaGet.status(), 200);
  t.false((await viaGet.text()).includes('data-testid="payload"'), 'a GET shows no payload');
  t.is((await context.request.post(`${url}/dead-letters/${letter.id}/open`, { form: {}, maxRedirects: 0 })).status(), 403);
  t.is((await context.request.get(`${url}/rejected-events/1`, { maxRedirects: 0 })).status(), 200);
  t.is((await context.request.post(`${url}/rejected-events/1/open`, { form: {}, maxRedirects: 0 })).status(), 403);
  t.is(await shows(), shownBefore, 'nothing was opened');
  const token = await page.locator('input[name=csrf]').first().getAttribute('value');
  const foreign = await context.request.post(`${url}/dead-letters/${letter.id}/replay`, {
    form: { force: '1', csrf: token! }, headers: { Origin: 'http://evil.example' }, maxRedirects: 0,
  });
  t.is(foreign.status(), 403);
  t.is((await admin.listDeadLetters({ endpoint: endpointId })).data[0]!.replay_count, before, 'nothing was replayed');

  // The same form with the session's token and this origin is accepted: the refusals were the checks'.
  const ok = await context.request.post(`${url}/dead-letters/${letter.id}/replay`, { form: { force: '1', csrf: token! }, headers: { Origin: url }, maxRedirects: 0 });
  t.is(ok.status(), 303);
  await context.close();
});

test.serial('pages carry headers that forbid framing and inline script; a frame on another page stays empty', async (t) => {
  const { context, page } = await freshPage();
  const res = await page.goto(`${url}/sign-in`);
  const headers = res!.headers();
  t.is(headers['x-frame-options'], 'DENY');
  t.regex(headers['content-security-policy']!, /frame-ancestors 'none'/);
  t.regex(headers['content-security-policy']!, /script-src 'self'/);
  t.notRegex(headers['content-security-policy']!, /unsafe-inline|unsafe-eval/);
  t.is(headers['x-content-type-options'], 'nosniff');
  t.regex(headers['cache-control']!, /no-store/);

  await page.setContent(`<iframe src="${url}/sign-in" title="console"></iframe>`);
  const frame = page.frames()[1]!;
  await frame.waitForLoadState().catch(() => {});
  t.is(await frame.getByLabel('Operator key').count(), 0, 'the console does not render inside a frame');
  await context.close();
});

test.serial('the sign-in form is usable from the keyboard alone', async (t) => {
  const { context, page } = await freshPage();
  await page.goto(`${url}/sign-in`);
  t.is(await focused(page, 'id'), 'operator-key', 'the key field has the focus');
  await page.keyboard.type(key);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  await page.keyboard.press('Tab');
  t.is(await focused(page, 'textContent'), 'Skip to content');
  await context.close();
});

test.serial('a session ends at its expiry, and when its operator is revoked', async (t) => {
  const { key: bobKey } = await createOperator(h.service.orm!.em.fork(), 'bob');
  const { context, page } = await freshPage();
  await signIn(page, bobKey);
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  const bob = await h.service.orm!.em.fork().execute<{ id: string }[]>("select id from operators where name = 'bob'");
  await h.service.orm!.em.fork().execute("update console_sessions set expires_at = now() - interval '1 second' where operator_id = ?", [bob[0]!.id]);
  await page.goto(`${url}/audit`);
  t.is(new URL(page.url()).pathname, '/sign-in', 'an expired session is no session, whatever the cookie says');

  await signIn(page, bobKey);
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  await revokeOperator(h.service.orm!.em.fork(), 'bob');
  await page.goto(`${url}/audit`);
  t.is(new URL(page.url()).pathname, '/sign-in', 'revoking the operator ends the session');
  await signIn(page, bobKey);
  await page.getByText('Unknown or revoked operator key.').waitFor();
  t.pass();
  await context.close();
});

test.serial('a flood of failed sign-ins from one address is refused there and locks no one else out', async (t) => {
  // ~20 anonymous tries a second from one client used to lock every operator out of the console.
  const statuses: number[] = [];
  for (let i = 0; i < 40; i++) {
    const res = await requestFrom('127.0.0.2', `${url}/sign-in`, {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `key=hs_op_${'x'.repeat(43)}`,
    });
    statuses.push(res.status);
  }
  t.true(statuses.slice(0, 5).every((s) => s === 403 || s === 401), statuses.join(','));
  t.true(statuses.filter((s) => s === 429).length >= 25, `the flooding address is throttled: ${statuses.join(',')}`);
  const { context, page } = await freshPage();
  await signIn(page);
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  t.is(new URL(page.url()).pathname, '/', 'an operator at another address signs in');
  await context.close();
});

test.serial("failed sign-ins for one operator key prefix from many addresses are refused for that prefix; another operator signs in", async (t) => {
  // The prefix a listing shows (hs_op_ and 4 characters), tried from a new address each time.
  const statuses: number[] = [];
  for (let i = 0; i < 25; i++) {
    const res = await requestFrom(`127.0.1.${i + 1}`, `${url}/sign-in`, {
      method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `key=hs_op_qqqq${String(i).padStart(39, 'y')}`,
    });
    statuses.push(res.status);
  }
  t.true(statuses.slice(0, 5).every((s) => s === 403 || s === 401), statuses.join(','));
  t.true(statuses.slice(15).every((s) => s === 429), `the prefix is throttled whatever the address: ${statuses.join(',')}`);
  // An operator who never signed in before (no key that worked lately to pass on), from yet another address.
  const { key: carolKey } = await createOperator(h.service.orm!.em.fork(), 'carol');
  const fresh = await requestFrom('127.0.1.99', `${url}/sign-in`, {
    method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `key=hs_op_qqqq${'z'.repeat(39)}`,
  });
  t.is(fresh.status, 429, 'the same prefix from a fresh address');
  const { context, page } = await freshPage();
  await signIn(page, carolKey);
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  t.is(new URL(page.url()).pathname, '/', 'another operator signs in');
  await context.close();
});

test.serial('sign-in is rate limited per address', async (t) => {
  const { context } = await freshPage();
  let last = 0;
  for (let i = 0; i < 15 && last !== 429; i++) {
    const res = await context.request.post(`${url}/sign-in`, { form: { key: 'wrong' }, maxRedirects: 0 });
    last = res.status();
    if (last === 429) t.regex(res.headers()['retry-after']!, /^\d+$/);
  }
  t.is(last, 429);
  await context.close();
});
