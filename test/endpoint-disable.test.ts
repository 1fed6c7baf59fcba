// Disabled endpoints (issue 10) over real HTTP receivers, the real NATS and Postgres, through the API: a
// 410 Gone disables the endpoint, nothing more is sent, what was queued and what arrives meanwhile is held
// in its queue and delivered after a restore; an endpoint whose attempts all fail for
// HOOKSTREAM_DISABLE_AFTER is disabled, and one success resets the clock. Every operational event is
// checked as a NATS subscriber of `ops.>` receives it.
import test from 'ava';
import type { Msg, Subscription } from '@nats-io/nats-core';
import { eventually, heldDeliveries } from './helpers/service.ts';
import { directAddress } from '../streams/direct.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { deliveryAddress } from '../streams/deliveries.ts';
import { apiClient, type ApiClient } from './helpers/api-client.ts';
import { createApiKey } from '../src/apikeys/store.ts';
import { applyEndpointEvent, EndpointStatus } from '../src/domain/endpoint.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';

let h: TestService;
let sub: Subscription;
const opsSeen: { subject: string; event: Record<string, unknown> }[] = [];

test.before(async () => {
  // Retries every 200 ms, so a second of failures is five attempts; endpoints failing for 1 s are disabled.
  h = await startTestService('endpoint_disable', {
    HOOKSTREAM_RETRY_SCHEDULE: Array(10).fill('200ms').join(','), HOOKSTREAM_DISABLE_AFTER: '1s',
  });
  sub = h.service.nc.subscribe('ops.>', {
    callback: (_e, m: Msg) => { opsSeen.push({ subject: m.subject, event: m.json<Record<string, unknown>>() }); },
  });
  await h.service.nc.flush();
});
test.after.always(async () => {
  sub?.unsubscribe();
  await h?.closeAll();
});

const as = async (t: Parameters<typeof apiClient>[2], tenant: string): Promise<ApiClient> =>
  apiClient(h.service.api!.url, (await createApiKey(h.service.orm!.em.fork(), tenant as TenantId, 'test')).key, t);
const publish = (tenant: string, type: string) => h.publish(tenant, type, { userId: 'user_1' });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const queued = (endpoint: EndpointId, tenant = 'tenant_gone') => heldDeliveries(h, { id: endpoint, tenant });

const opsEvent = (subject: string, endpoint?: string) =>
  eventually(() => opsSeen.find((m) => m.subject === subject && (endpoint === undefined || m.event['endpoint'] === endpoint))?.event, 15_000, subject);

test('410 Gone disables the endpoint: nothing is sent afterwards, deliveries are held and go out after a restore', async (t) => {
  const r = await h.receiver(() => 410);
  const t0 = Date.now();
  // What arrived, in a failure's report.
  t.teardown(() => { for (const x of r.received) t.log(`${x.at - t0} ms`, x.headers['webhook-id'], JSON.parse(x.body).type); });
  const c = await as(t, 'tenant_gone');
  const { body: ep } = await c.post('/v1/webhooks', { url: r.url, events: ['user.*'] });
  await publish('tenant_gone', 'user.created');
  await r.waitFor(1);

  const disabled = await eventually(async () => {
    const res = await c.get(`/v1/webhooks/${ep.id}`);
    return res.body.status === 'disabled' ? res.body : undefined;
  }, 10_000, 'the endpoint disabled');
  t.is(disabled.disabled_reason, 'gone');
  t.true(Math.abs(Date.parse(disabled.disabled_at) - r.received[0]!.at) < 5_000);

  // The 410'd delivery and two new events are held, not attempted, not dropped.
  r.respond = () => 204;
  await publish('tenant_gone', 'user.updated');
  await publish('tenant_gone', 'user.deleted');
  await eventually(async () => ((await queued(ep.id)) === 3 ? true : undefined), 10_000, 'three held deliveries');
  // Held, not just not yet sent: the two new ones wait at the endpoint's consumer and no instance pulls.
  // Its delivery stream's consumer, or with direct delivery its partition stream's.
  const { stream } = h.config.directDelivery ? directAddress({ id: ep.id, tenant: 'tenant_gone' }, h.config.eventPartitions) : deliveryAddress(ep.id, h.config.deliveryShards);
  await eventually(async () => {
    const ci = await h.service.jsm.consumers.info(stream, ep.id);
    return ci.num_waiting === 0 && ci.num_pending >= 2 ? true : undefined;
  }, 10_000, 'the consumer left unpulled');
  t.is(r.received.length, 1, 'nothing sent while disabled');
  t.is(await queued(ep.id), 3);
  const listed = await c.get('/v1/webhooks');
  t.like(listed.body.data.find((e: { id: string }) => e.id === ep.id), { status: 'disabled', disabled_reason: 'gone' });

  const notice = await opsEvent('ops.tenant_gone.endpoint.disabled', ep.id);
  t.deepEqual(Object.keys(notice).sort(), ['at', 'endpoint', 'failing_since', 'reason', 'tenant', 'type', 'v']);
  t.like(notice, { v: 1, type: 'endpoint.disabled', tenant: 'tenant_gone', endpoint: ep.id, reason: 'gone', at: disabled.disabled_at, failing_since: null });

  // A disabled endpoint may be changed (a new URL, say) and stays disabled.
  const patched = await c.patch(`/v1/webhooks/${ep.id}`, { description: 'moved' });
  t.like(patched.body, { status: 'disabled', description: 'moved' });

  const restored = await c.post(`/v1/webhooks/${ep.id}/restore`);
  t.is(restored.status, 200);
  t.like(restored.body, { status: 'active', disabled_reason: null, disabled_at: null });
  t.is((await c.post(`/v1/webhooks/${ep.id}/restore`)).status, 409, 'restoring an active endpoint is a conflict');
  // By webhook-id: delivery is at least once (a redelivery racing an ack may repeat one), never less.
  const after = await eventually(() => {
    const types = new Map(r.received.slice(1).map((x) => [x.headers['webhook-id'], JSON.parse(x.body).type as string]));
    return types.size >= 3 ? types : undefined;
  }, 15_000, 'the three held deliveries sent');
  t.deepEqual([...after.values()].sort(), ['user.created', 'user.deleted', 'user.updated']);
  t.is(after.get(r.received[0]!.headers['webhook-id']), 'user.created', 'the delivery that got the 410 is among them');
  await eventually(async () => ((await queued(ep.id)) === 0 ? true : undefined), 10_000, 'the queue emptied');

  const enabled = await opsEvent('ops.tenant_gone.endpoint.enabled', ep.id);
  t.deepEqual(Object.keys(enabled).sort(), ['at', 'endpoint', 'previous_reason', 'tenant', 'type', 'v']);
  t.like(enabled, { v: 1, type: 'endpoint.enabled', tenant: 'tenant_gone', endpoint: ep.id, previous_reason: 'gone', at: restored.body.updated_at });
});

test('an endpoint failing for HOOKSTREAM_DISABLE_AFTER is disabled (failing); one with a success now and then is not', async (t) => {
  const failing = await h.receiver(() => 500);
  // One success in every four answers: failures never last a second.
  const flaky = await h.receiver((_r, n) => (n % 4 === 3 ? 204 : 500));
  const c = await as(t, 'tenant_failing');
  const { body: bad } = await c.post('/v1/webhooks', { url: failing.url, events: ['user.*'] });
  const { body: ok } = await c.post('/v1/webhooks', { url: flaky.url, events: ['user.updated'] });
  await publish('tenant_failing', 'user.created');
  const until = Date.now() + 3000;
  while (Date.now() < until) {
    await publish('tenant_failing', 'user.updated');
    await sleep(250);
  }

  const disabled = await eventually(async () => {
    const res = await c.get(`/v1/webhooks/${bad.id}`);
    return res.body.status === 'disabled' ? res.body : undefined;
  }, 10_000, 'the failing endpoint disabled');
  t.is(disabled.disabled_reason, 'failing');
  const first = failing.received[0]!.at;
  t.true(Date.parse(disabled.disabled_at) - first >= 1000 - 50, 'not before a second of failures');
  const notice = await opsEvent('ops.tenant_failing.endpoint.disabled', bad.id);
  t.like(notice, { v: 1, type: 'endpoint.disabled', reason: 'failing', endpoint: bad.id, tenant: 'tenant_failing' });
  t.true(Math.abs(Date.parse(notice['failing_since'] as string) - first) < 1000, 'failing since its first failure');
  // Held from then on: the failing receiver hears nothing more.
  const heard = failing.received.length;
  await sleep(800);
  t.is(failing.received.length, heard);

  t.is((await c.get(`/v1/webhooks/${ok.id}`)).body.status, 'active', 'every success reset its clock');
  t.true(flaky.received.length >= 12);
  const recovered = await opsEvent('ops.tenant_failing.message.attempt.recovered', ok.id);
  t.deepEqual(Object.keys(recovered).sort(), ['at', 'endpoint', 'event_type', 'failing_since', 'tenant', 'type', 'v', 'webhook_id']);
  t.like(recovered, { v: 1, type: 'message.attempt.recovered', tenant: 'tenant_failing', endpoint: ok.id, event_type: 'user.updated' });
  t.regex(recovered['webhook_id'] as string, /^msg_/);
  t.true(Date.parse(recovered['failing_since'] as string) < Date.parse(recovered['at'] as string));
  t.true(h.service.metrics.opsEventsPublished.get({ type: 'message.attempt.recovered' }) >= 1);
});

test('the fold: a restore after a delete starts a new life (activeSince moves), one after a disable keeps it', (t) => {
  const id = 'webhook_01jtest' as EndpointId;
  let s = applyEndpointEvent(undefined, {
    v: 1, type: 'endpoint.created', id, tenant: 't' as TenantId, url: 'https://a.example.com', events: ['*'], description: null, secret: 's', at: '2026-01-01T00:00:00.000Z',
  }, 1);
  t.is(s.rateLimit, null);
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.disabled', id, reason: 'gone', at: '2026-01-02T00:00:00.000Z' }, 2);
  t.like(s, { status: EndpointStatus.Disabled, disabledReason: 'gone', disabledAt: '2026-01-02T00:00:00.000Z', activeSince: 1 });
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.restored', id, at: '2026-01-03T00:00:00.000Z' }, 3);
  t.like(s, { status: EndpointStatus.Active, disabledReason: null, disabledAt: null, activeSince: 1 });
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.deleted', id, at: '2026-01-04T00:00:00.000Z' }, 4);
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.restored', id, at: '2026-01-05T00:00:00.000Z' }, 5);
  t.like(s, { status: EndpointStatus.Active, activeSince: 5 });
  t.throws(() => applyEndpointEvent(s, { v: 1, type: 'endpoint.disabled', id, reason: 'bored' as 'gone', at: '2026-01-06T00:00:00.000Z' }, 6));
});

test('a deleted endpoint\'s failing clock is forgotten, in ENDPOINT_HEALTH too', async (t) => {
  const failing = await h.receiver(() => 500);
  const c = await as(t, 'tenant_forget_clock');
  const { body: ep } = await c.post('/v1/webhooks', { url: failing.url, events: ['user.*'] });
  await publish('tenant_forget_clock', 'user.created');
  const record = () => h.service.jsm.streams.getMessage('ENDPOINT_HEALTH', { last_by_subj: `endpoint_health.${ep.id}` }).catch(() => null);
  await eventually(async () => (await record()) ?? undefined, 10_000, 'a failing clock recorded');
  t.is((await c.delete(`/v1/webhooks/${ep.id}`)).status, 200);
  await eventually(async () => ((await record()) === null ? true : undefined), 10_000, 'the record purged');
  t.pass();
});
