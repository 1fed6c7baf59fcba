// A rolling upgrade to sealed delivery bodies (src/erasure/data-keys.ts): a delivery queued unsealed (by a
// version before sealing, here a router with HOOKSTREAM_SEAL_DELIVERIES=0) is still delivered, as it was, by
// a delivery role that seals; the next events are queued sealed and reach the receiver as the JSON they were.
import test from 'ava';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { eventually } from './helpers/service.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { isSealedBody } from '../src/erasure/data-keys.ts';
import { deliveryAddress } from '../streams/deliveries.ts';
import { messagesOf } from '../src/erasure/by-subject.ts';

let h: TestService;

test.before(async () => {
  // The router's sealing of queued bodies: pinned to the default path.
  h = await startTestService('erasure_sealing', { HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_EVENT_PARTITIONS: '0', HOOKSTREAM_RETRY_SCHEDULE: '2s,2s', HOOKSTREAM_SEAL_DELIVERIES: '0' });
});
test.after.always(() => h?.closeAll());

test.serial('a delivery queued unsealed is delivered after the upgrade; later ones are queued sealed and delivered as JSON', async (t) => {
  const tenant = 'tenant_sealing';
  let failing = true;
  const r = await h.receiver(() => (failing ? 500 : 204));
  const { endpoint } = await h.store.create(tenant as TenantId, { url: r.url, events: ['*'] });
  const queued = async () => {
    const at = deliveryAddress(endpoint.id, h.config.deliveryShards);
    const out: Uint8Array[] = [];
    for await (const m of messagesOf(h.service.jsm, at.stream, at.subject)) out.push(m.data);
    return out;
  };
  await h.publish(tenant, 'user.updated', { userId: 'user_before', note: 'plain' });
  await r.waitFor(1, 20_000);
  const [plain] = await queued();
  t.false(isSealedBody(plain!), 'queued unsealed');
  t.deepEqual(JSON.parse(Buffer.from(plain!).toString()), { type: 'user.updated', data: { userId: 'user_before', note: 'plain' } });

  await h.restart({ HOOKSTREAM_SEAL_DELIVERIES: '1' });
  failing = false;
  await h.publish(tenant, 'user.updated', { userId: 'user_after', note: 'sealed' });
  const got = await r.waitFor(3, 30_000);
  const bodies = got.slice(1).map((m) => JSON.parse(m.body) as { data: { userId: string } });
  t.deepEqual(bodies.map((b) => b.data.userId).sort(), ['user_after', 'user_before']);
  t.deepEqual(got.find((m) => m.body.includes('user_before') && got.indexOf(m) > 0)!.body, Buffer.from(plain!).toString(), 'the old body, byte for byte');
  t.true(await eventually(async () => ((await queued()).length === 0 ? true : undefined), 20_000, 'both acknowledged'));
});

test.serial('the router seals: a queued body is not JSON and names no id', async (t) => {
  const tenant = 'tenant_sealing_held';
  const r = await h.receiver(() => 204);
  const { endpoint } = await h.store.create(tenant as TenantId, { url: r.url, events: ['*'] });
  await h.store.disable(endpoint.id, 'gone');
  await h.publish(tenant, 'organization.updated', { organizationId: 'org_sealed', name: 'VISIBLE-NAME' });
  const at = deliveryAddress(endpoint.id, h.config.deliveryShards);
  const body = await (async () => {
    for (let i = 0; i < 200; i++) {
      for await (const m of messagesOf(h.service.jsm, at.stream, at.subject)) return m.data;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return undefined;
  })();
  t.true(body !== undefined && isSealedBody(body));
  const text = Buffer.from(body!).toString('latin1');
  t.false(text.includes('VISIBLE-NAME') || text.includes('org_sealed'));
  t.true(text.includes(tenant), 'its tenant is named in the head, in clear');
});
