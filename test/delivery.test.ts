// The delivery path end to end: real NATS, real Postgres, real HTTP receivers on loopback.
import test from 'ava';
import { Webhook } from 'standardwebhooks';
import { startHarness, eventually, type Harness } from './helpers/service.ts';
import { startReceiver, type Receiver } from './helpers/receiver.ts';
import type { TenantId } from '../src/domain/ids.ts';

let h: Harness;
const receivers: Receiver[] = [];
const receiver = async (...args: Parameters<typeof startReceiver>) => {
  const r = await startReceiver(...args);
  receivers.push(r);
  return r;
};
const publish = (tenant: string, type: string, data: unknown) =>
  h.service.js.publish(`events.${tenant}.${type}`, typeof data === 'string' ? data : JSON.stringify(data));

test.before(async () => {
  h = await startHarness('delivery', { HOOKSTREAM_RETRY_SCHEDULE: '400ms,800ms,1200ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '1s' });
});
test.after.always(async () => {
  await Promise.all(receivers.map((r) => r.close()));
  await h?.close();
});

test('an event reaches a subscribed endpoint as a signed POST with the exact headers and body', async (t) => {
  const r = await receiver();
  const tenant = 'tenant_exact' as TenantId;
  const { endpoint, signingSecret } = await h.store.create(tenant, { url: r.url, events: ['user.*'] });
  await publish(tenant, 'user.created', { userId: 'user_42', email: 'a@example.com' });
  const [got] = await r.waitFor(1);
  t.truthy(got);
  const headers = got!.headers;
  t.is(headers['content-type'], 'application/json');
  t.is(headers['service-webhook-event'], 'user.created');
  t.regex(String(headers['webhook-id']), /^msg_[0-9a-z]+$/);
  t.regex(String(headers['webhook-timestamp']), /^\d+$/);
  t.regex(String(headers['webhook-signature']), /^v1,[A-Za-z0-9+/=]+$/);
  t.deepEqual(JSON.parse(got!.body), { type: 'user.created', data: { userId: 'user_42', email: 'a@example.com' } });
  // The Standard Webhooks reference verifier accepts it, and rejects it under another secret.
  const verified = new Webhook(signingSecret).verify(got!.body, {
    'webhook-id': String(headers['webhook-id']),
    'webhook-timestamp': String(headers['webhook-timestamp']),
    'webhook-signature': String(headers['webhook-signature']),
  });
  t.deepEqual(verified, JSON.parse(got!.body));
  t.throws(() => new Webhook('whsec_' + Buffer.alloc(32, 7).toString('base64')).verify(got!.body, {
    'webhook-id': String(headers['webhook-id']),
    'webhook-timestamp': String(headers['webhook-timestamp']),
    'webhook-signature': String(headers['webhook-signature']),
  }));
  t.is(endpoint.tenant, tenant);
});
