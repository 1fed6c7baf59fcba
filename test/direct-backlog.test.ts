// Direct delivery (streams/direct.ts): an endpoint's new events wait in its consumer of its tenant's partition
// stream, not in its delivery stream. On the real nats-server, Postgres and loopback receivers: what an
// endpoint whose receiver fails or does not answer holds there is its backlog on /metrics, in the admin
// overview and endpoint list, and `deliveries show` says pending or retrying for it until the receiver answers
// 2xx and the consumer acks it. A consumer of the partition stream that is no endpoint's is nobody's backlog.
import test from 'ava';
import { AckPolicy, DeliverPolicy } from '@nats-io/jetstream';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import type { AdminClient } from '../src/admin/client.ts';
import { DeliveryState } from '../src/admin/protocol.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';
import { tenantPartition } from '../src/domain/partition.ts';
import { createWebhookIdCodec, deriveWebhookIdKey } from '../src/domain/webhook-id.ts';
import { EVENTS_STREAM, partitionStream } from '../streams/events.ts';
import { isDirectConsumer } from '../streams/direct.ts';

const PARTITIONS = 4;
const ENV = {
  HOOKSTREAM_EVENT_PARTITIONS: String(PARTITIONS), HOOKSTREAM_DIRECT_DELIVERY: '1',
  // Retries every 2 s for long enough that nothing dies while the test looks; one attempt at a time per
  // endpoint, so an endpoint whose receiver does not answer holds the rest unsent; and no attempt times out.
  HOOKSTREAM_RETRY_SCHEDULE: Array.from({ length: 40 }, () => '2s').join(','),
  HOOKSTREAM_MAX_IN_FLIGHT: '1',
  HOOKSTREAM_ATTEMPT_TIMEOUT: '5m',
};
const TENANT = 'tenant_dbacklog' as TenantId;
const STREAM = partitionStream(tenantPartition(TENANT, PARTITIONS));
/** A durable consumer of the partition stream that is no endpoint's (an operator's tail, say). */
const NOT_AN_ENDPOINT = 'ops_tail';

let h: TestService;
let admin: AdminClient;
let healthy = false;
/** Answers 503 until `healthy`. */
let failing: { r: Receiver; id: EndpointId; webhookIds: string[] };
/** Never answers. */
let silent: { r: Receiver; id: EndpointId; webhookIds: string[] };

const webhookIdOf = async (seq: number) => createWebhookIdCodec(deriveWebhookIdKey(Buffer.from(h.keys.masterKey, 'base64')))
  .encode({ seq, ms: Date.parse((await h.service.jsm.streams.info(EVENTS_STREAM)).created) });
const directConsumer = (id: string) => h.service.jsm.consumers.info(STREAM, id).catch(() => null);

type Gauges = (name: string, endpoint: string) => number;
async function scrape(): Promise<Gauges> {
  const res = await fetch(`${h.service.opsUrl}/metrics`);
  const lines = (await res.text()).split('\n');
  return (name, endpoint) => lines.filter((l) => l.startsWith(`${name}{`) && l.includes(`endpoint="${endpoint}"`))
    .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}
const gaugeBacklog = (g: Gauges, endpoint: string) =>
  g('hookstream_endpoint_backlog_pending', endpoint) + g('hookstream_endpoint_backlog_ack_pending', endpoint);

test.before(async () => {
  h = await startTestService('direct_backlog', ENV);
  ({ admin } = await h.operator({ timeoutMs: 60_000 }));
  const r1 = await h.receiver(() => (healthy ? 200 : 503));
  const r2 = await h.receiver(() => 'hang');
  failing = { r: r1, id: (await h.store.create(TENANT, { url: r1.url, events: ['user.*'] })).endpoint.id, webhookIds: [] };
  silent = { r: r2, id: (await h.store.create(TENANT, { url: r2.url, events: ['organization.*'] })).endpoint.id, webhookIds: [] };
  for (const e of [failing, silent]) await eventually(async () => (await directConsumer(e.id)) ?? undefined, 30_000, 'its direct consumer');
  await h.service.jsm.consumers.add(STREAM, {
    durable_name: NOT_AN_ENDPOINT, ack_policy: AckPolicy.Explicit, deliver_policy: DeliverPolicy.All, filter_subject: `events.${TENANT}.>`,
  });
  for (let i = 0; i < 4; i++) failing.webhookIds.push(await webhookIdOf((await h.publish(TENANT, 'user.updated', { userId: `user_${i}` })).seq));
  for (let i = 0; i < 3; i++) silent.webhookIds.push(await webhookIdOf((await h.publish(TENANT, 'organization.updated', { organizationId: `org_${i}` })).seq));
  // The failing endpoint's first event failed and came back for a retry; the silent one's first is in flight.
  await eventually(() => (failing.r.received.filter((x) => x.headers['webhook-id'] === failing.webhookIds[0]).length >= 2 ? true : undefined), 60_000, 'a retry');
  await silent.r.waitFor(1, 60_000);
});

test.after.always(() => h?.closeAll());

test('only an endpoint\'s durable consumer of a partition stream is a direct consumer', (t) => {
  t.true(isDirectConsumer({ name: 'webhook_01abc', config: { durable_name: 'webhook_01abc' } as never }));
  t.false(isDirectConsumer({ name: NOT_AN_ENDPOINT, config: { durable_name: NOT_AN_ENDPOINT } as never }));
  t.false(isDirectConsumer({ name: 'webhook_01abc', config: {} as never }), 'an ephemeral one');
});

test.serial('what the direct consumers hold is the endpoints\' backlog on /metrics, in the overview and in the endpoint list', async (t) => {
  // Nothing is acked while the test looks, so each endpoint's backlog stays at what was published to it;
  // the gauges and the overview are cached for 5 s.
  const g = await eventually(async () => {
    const s = await scrape();
    return gaugeBacklog(s, failing.id) === 4 && gaugeBacklog(s, silent.id) === 3 ? s : undefined;
  }, 30_000, 'the backlog gauges');
  t.is(gaugeBacklog(g, failing.id), 4);
  t.is(gaugeBacklog(g, silent.id), 3);
  t.true(g('hookstream_endpoint_backlog_pending', silent.id) >= 1, 'the silent endpoint\'s later events are not handed out');
  t.is(gaugeBacklog(g, NOT_AN_ENDPOINT), 0, 'a consumer that is no endpoint\'s is not counted');

  const listed = (await admin.listEndpoints({ tenant: TENANT })).data;
  const backlogOf = (id: string) => listed.find((e) => e.id === id)?.backlog;
  t.is((backlogOf(failing.id)?.pending ?? 0) + (backlogOf(failing.id)?.ack_pending ?? 0), 4);
  t.is((backlogOf(silent.id)?.pending ?? 0) + (backlogOf(silent.id)?.ack_pending ?? 0), 3);

  const overview = await eventually(async () => {
    const o = await admin.overview();
    return o.backlogs.some((b) => b.endpoint === failing.id) && o.backlogs.some((b) => b.endpoint === silent.id) ? o : undefined;
  }, 30_000, 'the overview\'s backlogs');
  const sumOf = (id: string) => overview.backlogs.filter((b) => b.endpoint === id).reduce((n, b) => n + b.pending + b.ack_pending, 0);
  t.is(sumOf(failing.id), 4);
  t.is(sumOf(silent.id), 3);
  t.false(overview.backlogs.some((b) => b.endpoint === NOT_AN_ENDPOINT));
});

test.serial('deliveries show: retrying while the direct consumer holds an event that failed', async (t) => {
  const retrying = await admin.showDelivery({ webhook_id: failing.webhookIds[0]!, endpoint: failing.id });
  t.is(retrying.state, DeliveryState.Retrying, retrying.reason);
  t.is(retrying.last_status, 503);
  t.is(retrying.queued?.stream, STREAM, 'the event\'s copy in the partition stream');
});

test.serial('deliveries show: pending while the direct consumer holds an event in flight or not handed out yet', async (t) => {
  const inFlight = await admin.showDelivery({ webhook_id: silent.webhookIds[0]!, endpoint: silent.id });
  t.is(inFlight.state, DeliveryState.Pending, inFlight.reason);
  t.regex(inFlight.reason, /handed out .* not acked yet/);
  const waiting = await admin.showDelivery({ webhook_id: silent.webhookIds[2]!, endpoint: silent.id });
  t.is(waiting.state, DeliveryState.Pending, waiting.reason);
  t.regex(waiting.reason, /not yet handed out/);
  t.is(waiting.queued?.stream, STREAM);
});

test.serial('deliveries show: acknowledged once the receiver answers 2xx and the consumer acked the event', async (t) => {
  healthy = true;
  await eventually(async () => {
    const ci = await directConsumer(failing.id);
    return ci && ci.num_pending === 0 && ci.num_ack_pending === 0 && ci.delivered.stream_seq > 0 ? true : undefined;
  }, 60_000, 'every event acked');
  const first = await admin.showDelivery({ webhook_id: failing.webhookIds[0]!, endpoint: failing.id });
  t.is(first.state, DeliveryState.Acknowledged, first.reason);
  t.true(first.attempts >= 3, `${first.attempts} attempts, two of them failed at least`);
  t.is(first.queued, null);
  for (const webhookId of failing.webhookIds) {
    const shown = await admin.showDelivery({ webhook_id: webhookId, endpoint: failing.id });
    t.is(shown.state, DeliveryState.Acknowledged, shown.reason);
  }
  const g = await eventually(async () => {
    const s = await scrape();
    return gaugeBacklog(s, failing.id) === 0 ? s : undefined;
  }, 30_000, 'the gauges after the acks');
  t.is(gaugeBacklog(g, silent.id), 3, 'the silent endpoint still holds its own');
});
