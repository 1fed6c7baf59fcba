// EVENTS with the ingest transform that adds the tenant's partition to each stored subject
// (`events.<tenant>.<p>.<event>`, docs/architecture.md): the whole service, on a real nats-server, reads
// both stored forms the same way. Routed and delivered with the producer's event type, rejected with the
// producer's subject, traced, shown and erased, while EVENTS still holds events stored before the transform.
import test from 'ava';
import type { StreamConfig } from '@nats-io/jetstream';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { EVENTS_STREAM } from '../streams/events.ts';

let h: TestService;
let admin: AdminClient;

/** What the next step of the delivery path configures: one transform for every event name's length. */
const PARTITIONING = { src: 'events.*.>', dest: 'events.{{wildcard(1)}}.{{partition(16,1)}}.>' };

const storedSubject = async (seq: number) => (await h.service.jsm.streams.getMessage(EVENTS_STREAM, { seq }))!.subject;

/** Switch EVENTS' ingest transform on (it stays on for the rest of the file). */
async function partitionEvents(): Promise<void> {
  const { config } = await h.service.jsm.streams.info(EVENTS_STREAM);
  if (!config.subject_transform) await h.service.jsm.streams.update(EVENTS_STREAM, { ...config, subject_transform: PARTITIONING } as StreamConfig);
}

test.before(async () => {
  h = await startTestService('partitioned_events', { HOOKSTREAM_RETRY_SCHEDULE: '300ms' });
  ({ admin } = await h.operator({ timeoutMs: 30_000 }));
});

test.after.always(() => h?.closeAll());

test.serial('events stored before and after the partition transform are delivered, traced, shown and erased alike', async (t) => {
  const tenant = 'tenant_parted' as TenantId;
  const r = await h.receiver(() => 200);
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['user.*', 'organization.*'] });
  const before = await h.publish(tenant, 'user.created', { userId: 'user_before' });
  t.is(await storedSubject(before.seq), `events.${tenant}.user.created`);
  await r.waitFor(1);

  await partitionEvents();
  const after = await h.publish(tenant, 'user.updated', { userId: 'user_after' });
  const dotted = await h.publish(tenant, 'organization.auth_policy.updated', { organizationId: 'org_after' });
  const stored = await storedSubject(after.seq);
  const partition = /^events\.tenant_parted\.(\d+)\.user\.updated$/.exec(stored)?.[1];
  t.truthy(partition, `stored as ${stored}`);
  t.is(await storedSubject(dotted.seq), `events.${tenant}.${partition}.organization.auth_policy.updated`);

  await r.waitFor(3);
  const types = r.received.map((x) => (JSON.parse(x.body) as { type: string }).type).sort();
  t.deepEqual(types, ['organization.auth_policy.updated', 'user.created', 'user.updated']);

  const delivered = r.received.find((x) => x.body.includes('user_after'))!;
  const webhookId = String(delivered.headers['webhook-id']);
  const shown = await admin.showDelivery({ webhook_id: webhookId, endpoint: endpoint.id });
  t.like(shown, { tenant, event_type: 'user.updated' });
  const traced = await eventually(async () => (await admin.traceEvents({ tenant, user: 'user_after' })).data[0], 30_000, 'trace of user_after');
  t.like(traced, { event_type: 'user.updated', webhook_id: webhookId });

  const erased = await admin.eraseSubject({ tenant, user: 'user_after' });
  t.is(erased.stores.events.erased, 1);
  t.is(await h.service.jsm.streams.getMessage(EVENTS_STREAM, { seq: after.seq }), null);
  t.is(await storedSubject(before.seq), `events.${tenant}.user.created`, 'the other user\'s event stays');
});

test.serial('a rejected event is recorded with the subject its producer published to', async (t) => {
  const tenant = 'tenant_parted_bad';
  await partitionEvents();
  await h.publishRaw(tenant, 'user.created', '{"userId": 42}');
  await h.publishRaw(tenant, 'user.nonsense', '{}');
  const rejected = await eventually(async () => {
    const { data } = await admin.listRejectedEvents({ tenant });
    return data.length === 2 ? data : undefined;
  }, 30_000, 'two rejected events');
  t.deepEqual(rejected.map((x) => [x.subject, x.event, x.reason]).sort(), [
    [`events.${tenant}.user.created`, 'user.created', 'invalid_data'],
    [`events.${tenant}.user.nonsense`, 'user.nonsense', 'unknown_event'],
  ]);
});
