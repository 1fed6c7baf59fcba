// An endpoint deleted and restored quickly (issue 8, point 7): a delivery the router routed before it
// learned of the delete, but stored after the delete's purge, must not reach the endpoint once restored;
// an event routed after the restore must. Real NATS, Postgres, router, delivery role and receiver; the
// race is made deterministic by publishing that late delivery ourselves, exactly as the router would.
import test from 'ava';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { JetStreamApiCodes, JetStreamApiError } from '@nats-io/jetstream';
import { eventually, queuedDeliveries } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import { DeliveryHeader, deliveryAddress } from '../streams/deliveries.ts';
import { routedBeforeRestore } from '../src/delivery/worker.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';

let h: TestService;
let r: Receiver;

test.before(async () => {
  h = await startTestService('restore-race');
  r = await h.receiver(() => 204);
});
test.after.always(() => h?.closeAll());

const queued = (endpoint: EndpointId) => queuedDeliveries(h, endpoint);

async function consumerGone(endpoint: EndpointId): Promise<true | undefined> {
  try {
    await h.service.jsm.consumers.info(deliveryAddress(endpoint, h.config.deliveryShards).stream, endpoint);
    return undefined;
  } catch (e) {
    if (e instanceof JetStreamApiError && e.code === JetStreamApiCodes.ConsumerNotFound) return true;
    throw e;
  }
}

const userIds = () => r.received.map((g) => (JSON.parse(g.body) as { data: { userId: string } }).data.userId);

test('a delivery routed before a delete and stored after its purge is not delivered after a restore; a new event is', async (t) => {
  const tenant = 'tenant_race' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['user.*'] });
  const routedVersion = endpoint.version; // the router's view before the delete
  await h.publish(tenant, 'user.created', { userId: 'user_before' });
  await r.waitFor(1);

  await h.store.delete(tenant, endpoint.id);
  await eventually(() => consumerGone(endpoint.id), 10_000, 'the delivery role retires the endpoint');
  await new Promise((res) => setTimeout(res, 300)); // its purge follows the consumer's removal at once

  // The late fan-out publish, with the headers the router sets, from its pre-delete view.
  const address = deliveryAddress(endpoint.id, h.config.deliveryShards);
  const hd = natsHeaders();
  hd.set(DeliveryHeader.WebhookId, 'msg_routedbeforedelete');
  hd.set(DeliveryHeader.Event, 'user.updated');
  hd.set(DeliveryHeader.Tenant, tenant);
  hd.set(DeliveryHeader.Endpoint, endpoint.id);
  hd.set(DeliveryHeader.EndpointVersion, String(routedVersion));
  await h.service.js.publish(address.subject, JSON.stringify({ type: 'user.updated', data: { userId: 'user_stale' } }), { headers: hd });
  t.is(await queued(endpoint.id), 1, 'stored after the purge: the race is set up');

  await h.store.restore(tenant, endpoint.id);
  await eventually(async () => (await consumerGone(endpoint.id)) ? undefined : true, 10_000, 'the delivery role resumes the endpoint');
  await h.publish(tenant, 'user.deleted', { userId: 'user_after' });
  await r.waitFor(2);
  await eventually(async () => (await queued(endpoint.id)) === 0 || undefined, 10_000, 'the late delivery is consumed');
  await new Promise((res) => setTimeout(res, 300));
  t.deepEqual(userIds(), ['user_before', 'user_after']);
});

test('routedBeforeRestore: older views dropped; current views, replays and header-less messages delivered', (t) => {
  const msg = (set: Record<string, string>) => {
    const hd = natsHeaders();
    for (const [k, v] of Object.entries(set)) hd.set(k, v);
    return { headers: hd };
  };
  const restored = { activeSince: 10 };
  t.true(routedBeforeRestore(restored, msg({ [DeliveryHeader.EndpointVersion]: '7' })));
  t.false(routedBeforeRestore(restored, msg({ [DeliveryHeader.EndpointVersion]: '10' })));
  t.false(routedBeforeRestore(restored, msg({ [DeliveryHeader.EndpointVersion]: '12' })));
  t.false(routedBeforeRestore(restored, msg({ [DeliveryHeader.EndpointVersion]: '7', [DeliveryHeader.Replay]: '1' })));
  t.false(routedBeforeRestore(restored, msg({})));
  t.false(routedBeforeRestore(restored, { headers: undefined }));
  t.false(routedBeforeRestore({ activeSince: undefined }, msg({ [DeliveryHeader.EndpointVersion]: '7' })));
});
