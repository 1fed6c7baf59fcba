// Delivery state of a webhook-id for an endpoint over admin.deliveries.show: every state, derived from the
// work queue, ATTEMPTS, dead_letters and EVENTS (see src/admin/delivery-state.ts).
import test from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Responder } from './helpers/receiver.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { DeliveryShowOut } from '../src/admin/protocol.ts';
import { createWebhookIdCodec, deriveWebhookIdKey, type WebhookIdCodec } from '../src/domain/webhook-id.ts';
import type { TenantId } from '../src/domain/ids.ts';

let h: TestService;
let admin: AdminClient;
let webhookIds: WebhookIdCodec;

async function subscribed(tenant: string, respond: Responder, opts: { ordering?: 'key' } = {}) {
  const r = await h.receiver(respond);
  const { endpoint } = await h.store.create(tenant as TenantId, { url: r.url, events: ['*'], ...opts });
  return { r, endpoint: endpoint.id };
}

const publish = (tenant: string, data: unknown) => h.publish(tenant, 'user.updated', data);

const stateOf = (webhookId: string, endpoint: string) => admin.showDelivery({ webhook_id: webhookId, endpoint });

const waitForState = (webhookId: string, endpoint: string, check: (s: DeliveryShowOut) => boolean, what: string) =>
  eventually(async () => {
    const s = await stateOf(webhookId, endpoint);
    return check(s) ? s : undefined;
  }, 20_000, what);

test.before(async () => {
  // A long attempt timeout: a hanging receiver holds its attempt while the test looks at it.
  h = await startTestService('admin_deliveries', { HOOKSTREAM_RETRY_SCHEDULE: '300ms,600ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '20s' });
  ({ admin } = await h.operator({ timeoutMs: 20_000 }));
  webhookIds = createWebhookIdCodec(deriveWebhookIdKey(Buffer.from(h.keys.masterKey, 'base64')));
});

test.after.always(() => h?.closeAll());

/** The webhook-id the service gives the event at `seq`: its sequence and EVENTS' creation time. */
const idOf = async (seq: number) => webhookIds.encode({ seq, ms: Date.parse((await h.service.jsm.streams.info('EVENTS')).created) });

test.serial('pending while the router has not routed the event; acknowledged once it has', async (t) => {
  // With direct delivery only an ordered endpoint's events go through the router.
  const { r, endpoint } = await subscribed('tenant_unrouted', () => 200, h.config.directDelivery ? { ordering: 'key' } : {});
  await h.restart({ HOOKSTREAM_ROLES: 'api,delivery,deadletter,admin,projector' });
  const ack = await publish('tenant_unrouted', { userId: 'user_u' });
  const webhookId = await idOf(ack.seq);
  const before = await stateOf(webhookId, endpoint);
  t.like(before, { state: 'pending', tenant: 'tenant_unrouted', event_type: 'user.updated', attempts: 0, queued: null });
  t.regex(before.reason, /not routed/);
  await h.restart();
  const [got] = await r.waitFor(1);
  t.is(got!.headers['webhook-id'], webhookId);
  const after = await waitForState(webhookId, endpoint, (s) => s.state === 'acknowledged', 'acknowledged');
  t.like(after, { attempts: 1, last_status: null, history: [], dead_letter: null });
});

test('pending: in the work queue, first attempt still running', async (t) => {
  const { r, endpoint } = await subscribed('tenant_pending', () => 'hang');
  await publish('tenant_pending', { userId: 'user_p' });
  const [got] = await r.waitFor(1);
  const s = await stateOf(String(got!.headers['webhook-id']), endpoint);
  t.like(s, { state: 'pending', attempts: 0, last_status: null, next_attempt_at: null, dead_letter: null, history: [] });
  t.truthy(s.queued);
  // Its work queue, or with direct delivery its partition stream.
  t.regex(s.queued!.stream, h.config.directDelivery ? /^EVENTS_\d+$/ : /^DELIVERIES_\d+$/);
});

test('retrying: in the work queue after a failure, with its status and the next attempt time', async (t) => {
  const { r, endpoint } = await subscribed('tenant_retrying', (_req, n) => (n === 0 ? 503 : 'hang'));
  await publish('tenant_retrying', { userId: 'user_r' });
  const [first] = await r.waitFor(1);
  const webhookId = String(first!.headers['webhook-id']);
  const s = await waitForState(webhookId, endpoint, (x) => x.state === 'retrying', 'retrying');
  t.like(s, { attempts: 1, last_status: 503, dead_letter: null });
  t.truthy(s.last_attempt_at);
  t.truthy(s.next_attempt_at);
  t.true(Date.parse(s.next_attempt_at!) > Date.parse(s.last_attempt_at!));
  t.truthy(s.queued);
  t.is(s.history.length, 1);
  t.like(s.history[0], { attempt: 1, status: 503, webhook_id: webhookId, endpoint });
});

test('a connection failure shows as the last error', async (t) => {
  // Nothing listens on the receiver's port once it is closed.
  const r = await h.receiver(() => 200);
  await r.close();
  const endpoint = (await h.store.create('tenant_refused' as TenantId, { url: r.url, events: ['*'] })).endpoint.id;
  const ack = await publish('tenant_refused', { userId: 'user_c' });
  const webhookId = await idOf(ack.seq);
  const s = await waitForState(webhookId, endpoint, (x) => x.state === 'dead', 'dead');
  t.is(s.last_status, null);
  t.truthy(s.last_error);
  t.is(s.attempts, 3);
});

test('acknowledged: at the first attempt, and after failures', async (t) => {
  const first = await subscribed('tenant_ok', () => 204);
  await publish('tenant_ok', { userId: 'user_ok' });
  const [got] = await first.r.waitFor(1);
  const ok = await waitForState(String(got!.headers['webhook-id']), first.endpoint, (x) => x.state === 'acknowledged', 'acknowledged');
  t.like(ok, { attempts: 1, queued: null, dead_letter: null, history: [] });

  const later = await subscribed('tenant_later', (_req, n) => (n < 2 ? 500 : 200));
  await publish('tenant_later', { userId: 'user_later' });
  const all = await later.r.waitFor(3);
  const s = await waitForState(String(all[0]!.headers['webhook-id']), later.endpoint, (x) => x.state === 'acknowledged', 'acknowledged after failures');
  t.like(s, { attempts: 3, last_status: null, queued: null, dead_letter: null });
  t.deepEqual(s.history.map((x) => x.status), [500, 500]);
});
