// The portal's "Send test event" (and POST /v1/webhooks/:id/test) in real Chromium against the real service: a signed webhook.test delivery
// reaches the endpoint's receiver and verifies with its secret, through the normal delivery path (logged);
// only active endpoints offer it; it counts against the tenant's endpoint-writes quota.
import test from 'ava';
import { jetstream } from '@nats-io/jetstream';
import { Webhook } from 'standardwebhooks';
import { launchBrowser, type TestBrowser } from './helpers/browser.ts';
import { startTestService, tenantClient, type TestService } from './helpers/fixture.ts';
import { eventually } from './helpers/service.ts';
import { connectNats } from '../src/nats/connect.ts';
import { createTestEvents } from '../src/endpoints/test-event.ts';
import { withTenantQuotas } from '../src/tenants/quotas.ts';
import { createTenantLimitsStore } from '../src/tenants/limits.ts';
import { searchDeliveries } from '../src/deliverylog/store.ts';
import { ErrorCode, isHookstreamError } from '../src/errors.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';

let h: TestService;
let b: TestBrowser;

test.before(async () => {
  h = await startTestService('portal_test_event');
  b = await launchBrowser();
});

test.after.always(async () => {
  await b?.close();
  await h?.closeAll();
});

test.serial('"Send test event" delivers a signed webhook.test event to that endpoint only, logged like any delivery', async (t) => {
  const api = await tenantClient(h, t, 'tenant_portal_test');
  const r = await h.receiver();
  const other = await h.receiver();
  const created = await api.post('/v1/webhooks', { url: r.url, events: ['user.*'] });
  t.is(created.status, 201);
  const { id, signing_secret: secret } = created.body as { id: string; signing_secret: string };
  t.is((await api.post('/v1/webhooks', { url: other.url, events: ['*'] })).status, 201);
  const link = await api.post('/v1/portal/sessions');
  const { page } = await b.page();
  await page.goto(link.body.url as string);
  await page.getByRole('link', { name: id }).click();
  await page.getByRole('button', { name: 'Send test event' }).click();
  await page.getByText('Test event sent').waitFor();

  const [got] = await r.waitFor(1);
  const webhookId = String(got!.headers['webhook-id']);
  t.regex(webhookId, /^msg_[0-9a-z]{26}$/);
  t.deepEqual(new Webhook(secret).verify(got!.body, {
    'webhook-id': webhookId, 'webhook-timestamp': String(got!.headers['webhook-timestamp']),
    'webhook-signature': String(got!.headers['webhook-signature']),
  }), { type: 'webhook.test', data: { endpointId: id, message: 'A test event: your endpoint receives and verifies webhooks.' } });
  t.false((await page.content()).includes(webhookId), 'the portal shows no webhook ids');
  // In the delivery log, as delivered.
  const logged = await eventually(async () => (await searchDeliveries(h.service.orm!.em.fork(), { webhookId }, { limit: 10 }))[0], 20_000, 'the logged test delivery');
  t.like(logged, { endpoint_id: id, tenant: 'tenant_portal_test', event_type: 'webhook.test', outcome: 'ok' });

  // The API's POST /v1/webhooks/:id/test does the same, and answers the webhook-id.
  const sent = await api.post(`/v1/webhooks/${id}/test`);
  t.is(sent.status, 202);
  t.deepEqual(sent.body, { id, webhook_id: sent.body.webhook_id });
  const [, second] = await r.waitFor(2);
  t.is(String(second!.headers['webhook-id']), sent.body.webhook_id);

  // Only an active endpoint offers it.
  t.is((await api.delete(`/v1/webhooks/${id}`)).status, 200);
  await page.reload();
  t.is(await page.getByRole('button', { name: 'Send test event' }).count(), 0);
  const refused = await api.post(`/v1/webhooks/${id}/test`);
  t.is(refused.status, 409);
  t.regex(refused.body.error.message, /is deleted/);
  t.is(other.received.length, 0, 'the other endpoint got nothing');
  t.is(r.received.length, 2);
});

test.serial('test events count against the tenant\'s endpoint-writes quota', async (t) => {
  const tenant = 'tenant_test_quota' as TenantId;
  const r = await h.receiver();
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['user.*'] });
  const nc = await connectNats({ url: h.nats.url });
  t.teardown(() => nc.drain());
  const limits = createTenantLimitsStore(h.service.orm!);
  await limits.set(tenant, { writesPerSecond: 2 }, 'test');
  // A frozen clock: the quota's bucket never refills during the test, however slow the machine.
  const quotas = withTenantQuotas(h.store, { orm: h.service.orm!, limits, now: () => 0 });
  const events = createTestEvents({ js: jetstream(nc), shards: h.config.deliveryShards, store: h.store, write: quotas.write });
  await events.send(tenant, endpoint.id as EndpointId);
  await events.send(tenant, endpoint.id as EndpointId);
  const refused = await events.send(tenant, endpoint.id as EndpointId).catch((e: unknown) => e);
  t.true(isHookstreamError(refused, ErrorCode.QuotaExceeded), String(refused));
  await r.waitFor(2);
  t.is(r.received.length, 2, 'the refused one was not sent');
});
