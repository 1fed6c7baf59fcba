// Turning direct delivery off (HOOKSTREAM_DIRECT_DELIVERY=0 after it was on, streams/events.ts), as a
// rolling restart does it: an instance with it on runs, a second starts with it off and writes the
// switch-off ahead (`hookstream_direct_until`), then the first restarts with it off too, all while events
// are published. On the real nats-server, Postgres and loopback receivers: every event reaches each
// endpoint once, those stored before the switch-off through its direct consumer and the later ones
// through the routers' queue; the direct consumers are deleted once drained; a start with it off after
// that delivers; and turning it on again is refused until then, allowed after.
import test from 'ava';
import { startService, type RunningService } from '../src/service.ts';
import { loadConfig } from '../src/config.ts';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';
import { tenantPartition } from '../src/domain/partition.ts';
import { deliveryAddress } from '../streams/deliveries.ts';
import { DIRECT_DRAIN_GRACE_MS, DIRECT_UNTIL_LEAD_MS, EVENTS_STREAM, directWindowOf, partitionStream } from '../streams/events.ts';
import { countDirectConsumers } from '../streams/direct.ts';

const PARTITIONS = 4;
const ENV = { HOOKSTREAM_RETRY_SCHEDULE: '200ms,400ms', HOOKSTREAM_EVENT_PARTITIONS: String(PARTITIONS) };
const ON = { ...ENV, HOOKSTREAM_DIRECT_DELIVERY: '1' };
const OFF = { ...ENV, HOOKSTREAM_DIRECT_DELIVERY: '0' };
const TENANTS = ['tenant_off_a', 'tenant_off_b'] as TenantId[];

let h: TestService;
test.before(async () => {
  h = await startTestService('direct_switch_off', ON);
});
test.after.always(() => h?.closeAll());

/** Another instance of the service on the same NATS and database. */
const instance = (env: Record<string, string>): Promise<RunningService> => startService(loadConfig({
  NATS_URL: h.nats.url, DATABASE_URL: h.db.url, PORT: '0', OPS_PORT: '0', CONSOLE_PORT: '0', HOOKSTREAM_ALLOW_PRIVATE_TARGETS: '1',
  HOOKSTREAM_DELIVERY_SHARDS: String(h.config.deliveryShards), HOOKSTREAM_MASTER_KEY: h.keys.masterKey,
  HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: h.keys.deadLetterPublicKey, HOOKSTREAM_DEAD_LETTER_SECRET_KEY: h.keys.deadLetterSecretKey,
  HOOKSTREAM_LOG_LEVEL: process.env['TEST_LOG_LEVEL'] ?? 'error', ...env,
}), h.log);

const windowNow = async () => directWindowOf((await h.service.jsm.streams.info(EVENTS_STREAM)).config);
const idOf = (x: { body: string }) => (JSON.parse(x.body) as { data: { n: number } }).data.n;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** Messages a consumer has handed out, all time (0 when it does not exist). */
const handedOut = async (stream: string, consumer: string) => (await h.service.jsm.consumers.info(stream, consumer).catch(() => null))?.delivered.consumer_seq ?? 0;

test.serial('a rolling restart to 0 while events flow: each once, before the switch-off directly, after it queued; the direct consumers drained and deleted', async (t) => {
  t.timeout(300_000);
  const since = (await windowNow()).directSince!;
  t.truthy(since, 'on since the first start');
  type Sub = { r: Receiver; id: EndpointId; tenant: TenantId };
  const subs: Sub[] = [];
  for (const tenant of TENANTS) {
    const r = await h.receiver();
    subs.push({ r, tenant, id: (await h.store.create(tenant, { url: r.url, events: ['user.*'] })).endpoint.id });
  }
  const consumerOf = (s: Sub) => ({ stream: partitionStream(tenantPartition(s.tenant, PARTITIONS)), consumer: s.id });
  for (const s of subs) await eventually(() => h.service.jsm.consumers.info(consumerOf(s).stream, s.id).catch(() => undefined), 10_000, 'its direct consumer');
  // Past the consumers' start slack: every event below is owed to every endpoint.
  await sleep(1200);

  // The second instance, with it off, lives throughout: events are published through it.
  const second = await instance(OFF);
  t.teardown(() => second.stop());
  const published: { n: number; tenant: TenantId; seq: number }[] = [];
  let n = 0;
  let publishing = true;
  const publisher = (async () => {
    while (publishing) {
      for (const tenant of TENANTS) {
        const ack = await second.js.publish(`events.${tenant}.user.updated`, JSON.stringify({ n: ++n }));
        published.push({ n, tenant, seq: ack.seq });
      }
      await sleep(40);
    }
  })();

  const { directUntil: until } = await windowNow();
  t.truthy(until, 'the instance started with 0 wrote the switch-off');
  t.true(until! >= Date.now() + DIRECT_UNTIL_LEAD_MS - 5000, `written ahead (${until! - Date.now()} ms)`);

  // An endpoint created in the lead: its events before the switch-off come through a consumer of its own.
  const late: Sub = { r: await h.receiver(), tenant: TENANTS[0]!, id: '' as EndpointId };
  late.id = (await h.store.create(late.tenant, { url: late.r.url, events: ['user.*'] })).endpoint.id;
  const lateFrom = n;

  // The first instance restarts with it off well before the switch-off time, then events go on past it.
  await sleep(Math.max(0, until! - Date.now() - 15_000));
  await h.restart(OFF);
  await sleep(Math.max(0, until! - Date.now() + 5000));
  publishing = false;
  await publisher;

  // When EVENTS stored each event: which side of the switch-off it is on.
  const storedAt = new Map<number, number>();
  for (const p of published) storedAt.set(p.n, (await h.service.jsm.streams.getMessage(EVENTS_STREAM, { seq: p.seq }))!.time.getTime());
  const before = published.filter((p) => storedAt.get(p.n)! < until!);
  const after = published.filter((p) => storedAt.get(p.n)! >= until!);
  t.true(before.length > 100 && after.length > 20, `events on both sides (${before.length} before, ${after.length} after)`);

  const expect = (s: Sub, from = 0) => published.filter((p) => p.tenant === s.tenant && p.n > from).map((p) => p.n);
  for (const [s, from] of [...subs.map((x) => [x, 0] as const), [late, lateFrom] as const]) {
    const want = expect(s, from);
    await eventually(() => (new Set(s.r.received.map(idOf).filter((x) => x > from)).size >= want.length ? true : undefined), 60_000, `every event at ${s.id}`);
  }
  await sleep(1500);
  for (const s of subs) {
    const got = s.r.received.map(idOf).sort((a, b) => a - b);
    t.deepEqual(got, expect(s), `${s.tenant}: each event once`);
    const queued = after.filter((p) => p.tenant === s.tenant).length;
    t.is(await handedOut(deliveryAddress(s.id, h.config.deliveryShards).stream, s.id), queued, `${s.tenant}: those stored from the switch-off on, and only those, through the queue`);
  }
  const lateGot = late.r.received.map(idOf).filter((x) => x > lateFrom).sort((a, b) => a - b);
  t.deepEqual(lateGot, expect(late, lateFrom), 'the endpoint created in the lead: each event once');

  // Drained past the switch-off, every direct consumer is deleted.
  await eventually(async () => ((await countDirectConsumers(h.service.jsm, PARTITIONS)) === 0 ? true : undefined),
    Math.max(0, until! + DIRECT_DRAIN_GRACE_MS - Date.now()) + 30_000, 'the direct consumers deleted');
  t.true(Date.now() >= until! + DIRECT_DRAIN_GRACE_MS, 'not before the grace');

  // A start with it off after that needs no direct consumer, and delivers.
  await second.stop();
  await h.restart(OFF);
  const last = await h.publish(TENANTS[1]!, 'user.deleted', { n: 1_000_000 });
  await eventually(() => (subs[1]!.r.received.some((x) => idOf(x) === 1_000_000) ? true : undefined), 15_000, 'the event after the restart');
  await sleep(1000);
  t.is(subs[1]!.r.received.filter((x) => idOf(x) === 1_000_000).length, 1);
  t.true(last.seq > 0);
  t.is(await countDirectConsumers(h.service.jsm, PARTITIONS), 0, 'none made again');
});

test.serial('turned off, it can be turned on again once its window is drained: a new start written ahead, the switch-off gone', async (t) => {
  const w = await windowNow();
  t.truthy(w.directUntil);
  const at = Date.now();
  await h.restart(ON);
  const again = await windowNow();
  t.is(again.directUntil, undefined, 'the switch-off is gone');
  t.true(again.directSince! >= at + DIRECT_UNTIL_LEAD_MS, 'the new start is written ahead, as the switch-off was');
  // Stored before the new start: the routers queue it to every endpoint, as they did since the switch-off.
  t.timeout(120_000);
  const r = await h.receiver();
  const id = (await h.store.create(TENANTS[0]!, { url: r.url, events: ['user.*'] })).endpoint.id;
  await sleep(500);
  await h.publish(TENANTS[0]!, 'user.updated', { n: 2_000_000 });
  await r.waitFor(1);
  await sleep(1000);
  t.deepEqual(r.received.map(idOf), [2_000_000], 'once, queued');
  // From the new start on, through the endpoint's direct consumer, made when that start came.
  const stream = partitionStream(tenantPartition(TENANTS[0]!, PARTITIONS));
  t.is(await handedOut(stream, id), 0, 'no direct consumer yet, or one that handed out nothing');
  await sleep(Math.max(0, again.directSince! - Date.now() + 500));
  await eventually(() => h.service.jsm.consumers.info(stream, id).catch(() => undefined), 10_000, 'its direct consumer');
  await h.publish(TENANTS[0]!, 'user.updated', { n: 2_000_001 });
  await r.waitFor(2);
  await sleep(1000);
  t.deepEqual(r.received.map(idOf), [2_000_000, 2_000_001]);
  t.is(await handedOut(stream, id), 1, 'the second through its direct consumer');
});
