// Fair fan-out (src/router/fair-publishes.ts): one tenant's large fan-out does not hold another tenant's
// delivery behind it. The router reads both tenants' events in one batch (they are published before it
// starts); the other tenant's delivery is stored after a share of the large fan-out, not after all of it,
// and the large tenant's events beyond its pending bound wait their turn and are all routed in the end.
// Real nats-server and Postgres; no delivery role (the deliveries stay in their stream to be counted).
import test from 'ava';
import { startHarness, eventually, type Harness } from './helpers/service.ts';
import { startRouter, type Router } from '../src/router/router.ts';
import { startEndpointDirectory, type EndpointDirectory } from '../src/endpoints/directory.ts';
import { createAckedPublisher, type AckedPublisher } from '../src/nats/acked-publisher.ts';
import { createServiceMetrics } from '../src/metrics.ts';
import { createWebhookIdCodec, deriveWebhookIdKey } from '../src/domain/webhook-id.ts';
import { MAX_EVENT_DEPTH } from '../src/domain/event-data.ts';
import { EVENTS_STREAM, ROUTER_CONSUMER } from '../streams/events.ts';
import { deliveryAddress } from '../streams/deliveries.ts';
import type { TenantId } from '../src/domain/ids.ts';

let h: Harness;
let publisher: AckedPublisher;
let directory: EndpointDirectory;
let router: Router | undefined;

test.before(async () => {
  // The router's fan-out into work queues itself: pinned to the default path.
  h = await startHarness('router_fairness', { HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_EVENT_PARTITIONS: '0', HOOKSTREAM_ROLES: 'projector', HOOKSTREAM_DELIVERY_SHARDS: '1' });
  publisher = createAckedPublisher(h.service.nc, { timeoutMs: 5000 });
  directory = await startEndpointDirectory({ js: h.service.js, jsm: h.service.jsm, log: h.log });
});
test.after.always(async () => {
  await router?.stop();
  await directory?.stop();
  publisher?.close();
  await h?.close();
});

test("a tenant's large fan-out does not hold another tenant's delivery behind it", async (t) => {
  const large = 'tenant_fair_large' as TenantId;
  const small = 'tenant_fair_small' as TenantId;
  const ENDPOINTS = 200;
  const EVENTS = 30; // 6,000 deliveries: past the tenant's pending bound (4,096), so some of its events wait
  for (let i = 0; i < ENDPOINTS; i++) await h.store.create(large, { url: `http://127.0.0.1:9/${i}`, events: ['user.*'] });
  const { endpoint: victim } = await h.store.create(small, { url: 'http://127.0.0.1:9/victim', events: ['user.*'] });
  await eventually(async () => { await directory.sync(); return directory.get(victim.id) ? true : undefined; }, 10_000, 'endpoints in the directory');

  for (let n = 0; n < EVENTS; n++) await h.service.js.publish(`events.${large}.user.created`, JSON.stringify({ userId: `user_${n}` }));
  await h.service.js.publish(`events.${small}.user.created`, JSON.stringify({ userId: 'user_victim' }));

  const metrics = createServiceMetrics();
  router = await startRouter({
    nc: h.service.nc, js: h.service.js, jsm: h.service.jsm, publisher, directory, shards: 1, log: h.log, metrics,
    webhookIds: createWebhookIdCodec(deriveWebhookIdKey(Buffer.from(h.keys.masterKey, 'base64'))),
    limits: { maxBytes: h.config.maxEventBytes, maxDepth: MAX_EVENT_DEPTH },
  });

  await eventually(async () => {
    const info = await h.service.jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER);
    return info.num_ack_pending === 0 && info.num_pending === 0 ? true : undefined;
  }, 60_000, 'every event routed and acked');
  const { stream, subject } = deliveryAddress(victim.id, 1);
  const stored = await h.service.jsm.streams.info(stream, { subjects_filter: 'deliveries.0.*' });
  const perSubject = stored.state.subjects ?? {};
  const largeStored = Object.entries(perSubject).filter(([s]) => s !== subject && !s.endsWith('.late')).reduce((n, [, c]) => n + c, 0);
  t.is(largeStored, ENDPOINTS * EVENTS, 'every delivery of the large fan-out is stored, held events included');
  t.is(perSubject[subject], 1);
  const victimAt = (await h.service.jsm.streams.getMessage(stream, { last_by_subj: subject }))!.seq;
  t.log(`the small tenant's delivery stored at ${victimAt} of ${stored.state.last_seq}`);
  t.true(victimAt < (ENDPOINTS * EVENTS) / 2, `stored at ${victimAt}, behind most of the large fan-out`);
  const held = Number(/^hookstream_router_events_held_total (\d+)$/m.exec(metrics.registry.render())?.[1] ?? 0);
  t.log(`events that waited for their tenant's share: ${held}`);
  t.true(held > 0, 'the large tenant\'s events past its pending bound waited, and are counted');
});
