// The README's screenshots of the operator console and the tenant portal: a service with its own
// nats-server and database (the test helpers), some endpoints, failed deliveries and a rejected event,
// then Chromium signs in and photographs each main page into docs/screenshots/. Run: npm run screenshots
import { mkdir } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { launchBrowser } from '../test/helpers/browser.ts';
import { startTestService } from '../test/helpers/fixture.ts';
import { eventually } from '../test/helpers/service.ts';
import { createApiKey } from '../src/apikeys/store.ts';
import { createOperator } from '../src/operators/store.ts';
import type { TenantId } from '../src/domain/ids.ts';

const OUT = fileURLToPath(new URL('./screenshots/', import.meta.url));
await mkdir(OUT, { recursive: true });

const h = await startTestService('screenshots', { HOOKSTREAM_RETRY_SCHEDULE: '200ms,400ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '2s' });
const b = await launchBrowser();
try {
  const { admin } = await h.operator();
  const ok = await h.receiver(() => 204);
  const failing = await h.receiver(() => 503);
  const tenant = 'tenant_acme' as TenantId;
  await h.store.create(tenant, { url: ok.url, events: ['user.*', 'organization.*'] });
  const { endpoint } = await h.store.create(tenant, { url: failing.url, events: ['user.*'] });
  await h.store.create('tenant_globex' as TenantId, { url: ok.url, events: ['*'], rate_limit: 50 });
  for (let i = 1; i <= 3; i++) await h.publish(tenant, 'user.created', { userId: `user_${i}`, email: `user${i}@example.com` });
  await h.publishRaw(tenant, 'user.created', '{"userId": "user_4"');
  const letters = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint: endpoint.id });
    return page.data.length === 3 ? page.data : undefined;
  }, 30_000, 'dead letters');
  const { key } = await createOperator(h.service.orm!.em.fork(), 'alice@example.com');

  const { page } = await b.page();
  await page.setViewportSize({ width: 1280, height: 800 });
  const shot = (name: string, fullPage = false) => page.screenshot({ path: `${OUT}${name}.png`, fullPage });
  await page.goto(`${h.service.console!.url}/sign-in`);
  await shot('sign-in');
  await page.getByLabel('Operator key').fill(key);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  await shot('overview');
  await page.getByRole('link', { name: 'Dead letters', exact: true }).click();
  await shot('dead-letters');
  await page.getByRole('link', { name: letters[0]!.webhook_id }).click();
  await shot('dead-letter', true);
  await page.goto(`${h.service.console!.url}/deliveries?webhook_id=${letters[1]!.webhook_id}&endpoint=${endpoint.id}`);
  await shot('deliveries', true);
  await page.getByRole('link', { name: 'Endpoints', exact: true }).click();
  await shot('endpoints');
  await page.getByRole('link', { name: 'Audit log', exact: true }).click();
  await shot('audit-log');

  const api = await createApiKey(h.service.orm!.em.fork(), tenant, 'screenshots');
  const link = await fetch(`${h.service.api!.url}/v1/portal/sessions`, { method: 'POST', headers: { authorization: `Bearer ${api.key}` } });
  await page.goto(((await link.json()) as { url: string }).url);
  await shot('portal');
  console.log(`screenshots in ${OUT}`);
} finally {
  await b.close();
  await h.closeAll();
}
