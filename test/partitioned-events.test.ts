// EVENTS split into partitions by nats-server (HOOKSTREAM_EVENT_PARTITIONS, the delivery path's next shape,
// docs/architecture.md): its ingest transform stores `events.<tenant>.<p>.<event>`, and each EVENTS_<p>
// copies its partition. The whole service on a real nats-server reads both stored forms alike (routed,
// delivered, rejected, traced, shown), and erasure reaches every copy, while EVENTS still holds events
// stored before the switch.
import test from 'ava';
import { runCli } from './helpers/cli.ts';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { tenantPartition } from '../src/domain/partition.ts';
import { messagesOf } from '../src/erasure/by-subject.ts';
import { EVENTS_STREAM, partitionStream, sourcedSeq } from '../streams/events.ts';
import { ensureStreams } from '../streams/index.ts';

const PARTITIONS = 16;
const TENANT = 'tenant_parted' as TenantId;
/** Another tenant in TENANT's partition: its copies sit between TENANT's. */
const NEIGHBOUR = Array.from({ length: 1000 }, (_, i) => `tenant_near_${i}`)
  .find((x) => x !== TENANT && tenantPartition(x, PARTITIONS) === tenantPartition(TENANT, PARTITIONS))! as TenantId;
const STREAM = partitionStream(tenantPartition(TENANT, PARTITIONS));

let h: TestService;
let admin: AdminClient;
let before: number;
let r: Receiver;
let endpointId: string;

const storedSubject = async (seq: number) => (await h.service.jsm.streams.getMessage(EVENTS_STREAM, { seq }))?.subject;

/** The tenant's copies in its partition stream: their EVENTS sequence and body. */
async function copiesOf(tenant: string): Promise<{ events: number; text: string }[]> {
  const out: { events: number; text: string }[] = [];
  for await (const m of messagesOf(h.service.jsm, STREAM, `events.${tenant}.>`)) out.push({ events: sourcedSeq(m.header)!, text: Buffer.from(m.data).toString() });
  return out;
}

test.before(async () => {
  // It starts unpartitioned and turns partitions on itself: the default path, pinned.
  h = await startTestService('partitioned_events', { HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_EVENT_PARTITIONS: '0', HOOKSTREAM_RETRY_SCHEDULE: '300ms' });
  ({ admin } = await h.operator({ timeoutMs: 30_000 }));
  r = await h.receiver(() => 200);
  endpointId = (await h.store.create(TENANT, { url: r.url, events: ['user.*', 'organization.*'] })).endpoint.id;
  // An event stored and delivered before the switch, in the producer's form.
  before = (await h.publish(TENANT, 'user.created', { userId: 'user_before' })).seq;
  await r.waitFor(1);
  await h.restart({ HOOKSTREAM_RETRY_SCHEDULE: '300ms', HOOKSTREAM_EVENT_PARTITIONS: String(PARTITIONS) });
});

test.after.always(() => h?.closeAll());

test.serial('events stored before and after the switch are delivered, traced and shown alike; each partitioned one is copied once', async (t) => {
  t.is(await storedSubject(before), `events.${TENANT}.user.created`);
  const after = await h.publish(TENANT, 'user.updated', { userId: 'user_after' });
  const dotted = await h.publish(TENANT, 'organization.auth_policy.updated', { organizationId: 'org_after' });
  const p = tenantPartition(TENANT, PARTITIONS);
  t.is(await storedSubject(after.seq), `events.${TENANT}.${p}.user.updated`);
  t.is(await storedSubject(dotted.seq), `events.${TENANT}.${p}.organization.auth_policy.updated`);

  await r.waitFor(3);
  t.deepEqual(r.received.map((x) => (JSON.parse(x.body) as { type: string }).type).sort(), ['organization.auth_policy.updated', 'user.created', 'user.updated']);
  const copies = await eventually(async () => { const c = await copiesOf(TENANT); return c.length === 2 ? c : undefined; }, 10_000, 'two copies');
  t.deepEqual(copies.map((c) => c.events), [after.seq, dotted.seq], 'in EVENTS order, the one from before the switch not among them');

  // Read after the switch, from both stored forms.
  for (const [user, type] of [['user_before', 'user.created'], ['user_after', 'user.updated']] as const) {
    const webhookId = String(r.received.find((x) => x.body.includes(user))!.headers['webhook-id']);
    t.like(await admin.showDelivery({ webhook_id: webhookId, endpoint: endpointId }), { tenant: TENANT, event_type: type });
    const traced = await eventually(async () => (await admin.traceEvents({ tenant: TENANT, user })).data[0], 30_000, `trace of ${user}`);
    t.like(traced, { event_type: type, webhook_id: webhookId });
  }
});

test.serial('erasing a user erases its events\' copies in the partition stream, between other users\' and another tenant\'s', async (t) => {
  const mine: number[] = [];
  for (let i = 0; i < 30; i++) {
    const ack = await h.publish(TENANT, 'user.updated', { userId: i % 3 === 0 ? 'user_gone' : `user_kept_${i}`, i });
    if (i % 3 === 0) mine.push(ack.seq);
    await h.publish(NEIGHBOUR, 'user.updated', { userId: 'user_gone', i });
  }
  await r.waitFor(3 + 30);
  await eventually(async () => ((await copiesOf(TENANT)).some((c) => c.events === mine.at(-1)) ? true : undefined), 10_000, 'the last copy');

  const erased = await admin.eraseSubject({ tenant: TENANT, user: 'user_gone' });
  t.is(erased.stores.partition_copies.erased, mine.length);
  t.true(erased.routing_caught_up);
  const left = await copiesOf(TENANT);
  t.deepEqual(left.filter((c) => c.text.includes('user_gone')), []);
  t.is(left.filter((c) => c.text.includes('user_kept_')).length, 20);
  t.is((await copiesOf(NEIGHBOUR)).length, 30, 'the other tenant\'s copies of the same user id stay');
  for (const seq of mine) t.is(await h.service.jsm.streams.getMessage(EVENTS_STREAM, { seq }), null);
  t.is(await storedSubject(before), `events.${TENANT}.user.created`, 'another user\'s event stays');
  // Again: nothing left to erase.
  t.is((await admin.eraseSubject({ tenant: TENANT, user: 'user_gone' })).stores.partition_copies.erased, 0);
});

test.serial('a rejected event is recorded with the subject its producer published to', async (t) => {
  const tenant = 'tenant_parted_bad';
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

test.serial('the partition count is fixed once set: another one, or none, is refused with the value to set', async (t) => {
  const opts = { shards: h.config.deliveryShards, maxQueued: 100, retrySchedule: [300], replicas: 1 };
  for (const partitions of [8, 0]) {
    const e = await t.throwsAsync(ensureStreams(h.service.jsm, { ...opts, partitions }));
    t.is(e?.name, 'ConfigError');
    t.is(e?.message, `HOOKSTREAM_EVENT_PARTITIONS: is ${partitions} but EVENTS is split into ${PARTITIONS} partitions, which is fixed once set: set it to ${PARTITIONS}`);
  }
});

test.serial('while nats-server copies nothing into the partition, erasure says it had not caught up; once copying resumes, the erased event is never copied', async (t) => {
  const jsm = h.service.jsm;
  const { config } = await jsm.streams.info(STREAM);
  // The partition stream without its source: what a stalled copy looks like (a cluster electing its leader).
  await jsm.streams.update(STREAM, { ...config, sources: [] });
  t.teardown(() => jsm.streams.update(STREAM, config).then(() => {}));
  const late = await h.publish(TENANT, 'user.updated', { userId: 'user_late' });
  // Another user's event after it, kept: erasure waits for its copy (its real length: 30 s) before it says so.
  const other = await h.publish(TENANT, 'user.updated', { userId: 'user_kept_late' });
  const first = await admin.eraseSubject({ tenant: TENANT, user: 'user_late' });
  t.false(first.routing_caught_up);
  t.is(first.stores.partition_copies.erased, 0);
  t.is(await h.service.jsm.streams.getMessage(EVENTS_STREAM, { seq: late.seq }), null);

  await jsm.streams.update(STREAM, config);
  await eventually(async () => ((await copiesOf(TENANT)).some((c) => c.events === other.seq) ? true : undefined), 30_000, 'copying resumed');
  t.deepEqual((await copiesOf(TENANT)).filter((c) => c.text.includes('user_late')), [], 'the erased event was never copied');
  t.true((await admin.eraseSubject({ tenant: TENANT, user: 'user_late' })).routing_caught_up);
});

test.serial('erasing the whole tenant purges its partition copies and leaves its neighbour\'s; while nothing is copied, it stops before the purges', async (t) => {
  t.true((await copiesOf(TENANT)).length > 0);
  const erase = () => runCli(['erase', '--tenant', TENANT, '--everything', '--json', '--operator', 'dpo@example.com'], {
    ...process.env, NATS_URL: h.nats.url, DATABASE_URL: h.db.url, HOOKSTREAM_MASTER_KEY: h.keys.masterKey,
    HOOKSTREAM_DELIVERY_SHARDS: String(h.config.deliveryShards), HOOKSTREAM_EVENT_PARTITIONS: String(PARTITIONS),
  });
  const jsm = h.service.jsm;
  const { config } = await jsm.streams.info(STREAM);
  await jsm.streams.update(STREAM, { ...config, sources: [] });
  t.teardown(() => jsm.streams.update(STREAM, config).then(() => {}));
  const uncopied = await h.publish(TENANT, 'user.updated', { userId: 'user_uncopied' });
  const stalled = await erase();
  t.is(stalled.code, 1);
  t.regex(stalled.stderr, new RegExp(`nats-server has not copied the tenant's events into ${STREAM} for 30 s .*: run the erasure again`));
  t.truthy(await h.service.jsm.streams.getMessage(EVENTS_STREAM, { seq: uncopied.seq }), 'EVENTS not purged yet');

  await jsm.streams.update(STREAM, config);
  const run = await erase();
  t.is(run.code, 0, run.stderr);
  t.deepEqual(await copiesOf(TENANT), []);
  t.is((await copiesOf(NEIGHBOUR)).length, 30);
  t.is(await storedSubject(before), undefined);
});
