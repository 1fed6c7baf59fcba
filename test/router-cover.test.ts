// Issue 13: the router routes each event with the directory as it is and acks it only after a covering
// directory sync (src/router/cover.ts), adding before the ack whatever endpoint an earlier write made a
// target. These tests make the router's directory miss endpoint writes on purpose (a view frozen until its
// next sync, as a directory whose consumer has not delivered the write yet), run two router instances on
// the one durable consumer, and check that an endpoint created (or restored) before an event is published
// receives it exactly once. Real nats-server and Postgres; the service runs every role but the router.
import test from 'ava';
import { startHarness, eventually, type Harness } from './helpers/service.ts';
import { startReceiver, type Receiver } from './helpers/receiver.ts';
import { createSyncCover } from '../src/router/cover.ts';
import { startRouter, type Router } from '../src/router/router.ts';
import { startEndpointDirectory, type EndpointDirectory } from '../src/endpoints/directory.ts';
import { createAckedPublisher, type AckedPublisher } from '../src/nats/acked-publisher.ts';
import { createServiceMetrics } from '../src/metrics.ts';
import { createLogger } from '../src/log.ts';
import { createWebhookIdCodec, deriveWebhookIdKey } from '../src/domain/webhook-id.ts';
import { MAX_EVENT_DEPTH } from '../src/domain/event-data.ts';
import { EndpointStatus, type EndpointState } from '../src/domain/endpoint.ts';
import type { TenantId } from '../src/domain/ids.ts';

// --- the cover on its own -------------------------------------------------------------------------

test('a cover resolves only after a sync that started after it was asked for, shared and spaced', async (t) => {
  const starts: number[] = [];
  let finish: (() => void)[] = [];
  const fake = { sync: () => new Promise<void>((r) => { starts.push(performance.now()); finish.push(r); }) };
  const cover = createSyncCover(fake, 20);
  let a = false;
  let b = false;
  const pa = cover.after().then(() => { a = true; });
  await new Promise((r) => setTimeout(r, 5));
  t.is(starts.length, 1, 'the first caller starts a sync at once');
  // Asked while that sync runs: the running one may have read the stream before, so it does not count.
  const pb = cover.after().then(() => { b = true; });
  const pc = cover.after();
  finish.shift()!();
  await pa;
  await new Promise((r) => setTimeout(r, 1));
  t.true(a);
  t.false(b, 'a caller that came during a sync waits for the next one');
  await eventually(() => (starts.length === 2 ? true : undefined), 1000, 'second sync');
  t.true(starts[1]! - starts[0]! >= 19, 'syncs are spaced by the interval');
  finish.shift()!();
  await Promise.all([pb, pc]);
  t.true(b);
  t.is(cover.syncs(), 2, 'two callers that came together shared one sync');
});

test('a failed sync fails the callers it was covering, and the next one is tried afresh', async (t) => {
  let n = 0;
  const cover = createSyncCover({ sync: async () => { if (n++ === 0) throw new Error('stream unavailable'); } }, 1);
  await t.throwsAsync(cover.after(), { message: 'stream unavailable' });
  await t.notThrowsAsync(cover.after());
});

// --- routers whose directory misses writes ------------------------------------------------------------

let h: Harness;
const receivers: Receiver[] = [];
const routers: Router[] = [];
const directories: EndpointDirectory[] = [];
let publisher: AckedPublisher;

/**
 * A directory that answers from a view frozen at `freeze()` until its next sync has completed: what a
 * router sees when its directory's consumer has not delivered recent writes yet (an idle consumer whose
 * pull had expired, a reset, a slow connection). It does not know it is behind.
 */
interface Lagging extends EndpointDirectory {
  freeze(): void;
}
function lagging(real: EndpointDirectory): Lagging {
  let frozen: { byTenant: Map<string, EndpointState[]>; seq: number } | undefined;
  return {
    ...real,
    activeFor: (tenant) => (frozen ? frozen.byTenant.get(tenant) ?? [] : real.activeFor(tenant)),
    lastSeq: () => (frozen ? frozen.seq : real.lastSeq()),
    behind: () => false,
    sync: async () => {
      await real.sync();
      frozen = undefined;
    },
    freeze() {
      const byTenant = new Map<string, EndpointState[]>();
      for (const e of real.all()) {
        if (e.status !== EndpointStatus.Active) continue;
        byTenant.set(e.tenant, [...(byTenant.get(e.tenant) ?? []), e]);
      }
      frozen = { byTenant, seq: real.lastSeq() };
    },
  };
}

const metrics = createServiceMetrics();
const lines: string[] = [];
const routerLog = createLogger({ level: 'info', write: (l) => lines.push(l) });
const catchUps = () => lines.filter((l) => l.includes('its first routing missed')).length;
const startRouterInstance = async (directory: EndpointDirectory) => {
  const router = await startRouter({
    nc: h.service.nc, js: h.service.js, jsm: h.service.jsm, publisher, directory, shards: h.config.deliveryShards, log: routerLog, metrics,
    webhookIds: createWebhookIdCodec(deriveWebhookIdKey(Buffer.from(h.keys.masterKey, 'base64'))),
    limits: { maxBytes: h.config.maxEventBytes, maxDepth: MAX_EVENT_DEPTH },
  });
  routers.push(router);
  return router;
};
const newDirectory = async () => {
  const d = await startEndpointDirectory({ js: h.service.js, jsm: h.service.jsm, log: h.log });
  directories.push(d);
  return d;
};

const publish = (tenant: string, userId: string) => h.service.js.publish(`events.${tenant}.user.created`, JSON.stringify({ userId }));
const userIds = (r: Receiver) => r.received.map((x) => (JSON.parse(x.body) as { data: { userId: string } }).data.userId);
const receiver = async () => {
  const r = await startReceiver();
  receivers.push(r);
  return r;
};

test.before(async () => {
  // The router's covering sync for endpoints it routes to: pinned to the default path.
  h = await startHarness('router_cover', { HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_EVENT_PARTITIONS: '0', HOOKSTREAM_ROLES: 'delivery,deadletter,projector' });
  publisher = createAckedPublisher(h.service.nc, { timeoutMs: 5000 });
});
test.after.always(async () => {
  for (const r of routers) await r.stop();
  for (const d of directories) await d.stop();
  publisher?.close();
  await Promise.all(receivers.map((r) => r.close()));
  await h?.close();
});

// One file, one durable router consumer: the tests below share the two lagging instances, in order.
let a: Lagging;
let b: Lagging;
test.serial('two routers whose directories miss the creation: every event published after it reaches the endpoint once', async (t) => {
  a = lagging(await newDirectory());
  b = lagging(await newDirectory());
  await startRouterInstance(a);
  await startRouterInstance(b);
  const tenant = 'tenant_cover' as TenantId;
  const r = await receiver();
  const caughtUp = catchUps();
  a.freeze();
  b.freeze();
  await h.store.create(tenant, { url: r.url, events: ['user.*'] });
  // Both routers still route from views without the endpoint; each event must come through their catch-up.
  const ids = Array.from({ length: 40 }, (_, i) => `user_c${i}`);
  await Promise.all(ids.map((id) => publish(tenant, id)));
  await r.waitFor(ids.length);
  await new Promise((res) => setTimeout(res, 500)); // room for a double to show
  t.deepEqual(userIds(r).sort(), [...ids].sort(), 'each event exactly once');
  t.true(catchUps() - caughtUp >= 1, 'the catch-up path delivered them');
});

test.serial('an endpoint deleted and restored before the event, unseen by the router: the restored endpoint receives it', async (t) => {
  const tenant = 'tenant_cover_restore' as TenantId;
  const r = await receiver();
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['user.*'] });
  await a.sync();
  await b.sync();
  // The routers' view: active at its creation version. Meanwhile it is deleted and restored.
  a.freeze();
  b.freeze();
  await h.store.delete(tenant, endpoint.id);
  await eventually(() => (h.service.directory!.get(endpoint.id)?.status === EndpointStatus.Deleted ? true : undefined), 5000, 'delete applied');
  await h.store.restore(tenant, endpoint.id);
  await eventually(() => (h.service.directory!.get(endpoint.id)?.status === EndpointStatus.Active ? true : undefined), 5000, 'restore applied');
  await publish(tenant, 'user_after_restore');
  const [got] = await r.waitFor(1, 10_000);
  t.is((JSON.parse(got!.body) as { data: { userId: string } }).data.userId, 'user_after_restore');
  await new Promise((res) => setTimeout(res, 500));
  t.is(r.received.length, 1, 'once: the stale copy is dropped by the delivery role');
});

test.serial('after the directories sat idle, endpoints created just before an event receive it, with two routers', async (t) => {
  // Plain directories this time (nothing frozen): the routers' own consumers have to deliver the writes.
  for (const r of routers.splice(0)) await r.stop();
  await startRouterInstance(await newDirectory());
  await startRouterInstance(await newDirectory());
  await new Promise((res) => setTimeout(res, 2500)); // idle: no endpoint write, no event
  const tenant = 'tenant_cover_idle' as TenantId;
  const got: Receiver[] = [];
  for (let i = 0; i < 10; i++) {
    const r = await receiver();
    got.push(r);
    await h.store.create(tenant, { url: r.url, events: ['user.*'] });
    await publish(tenant, `user_idle${i}`);
  }
  // Endpoint i was created before events i..9 were published.
  for (let i = 0; i < 10; i++) await got[i]!.waitFor(10 - i, 10_000);
  await new Promise((res) => setTimeout(res, 500));
  for (let i = 0; i < 10; i++) {
    const ids = userIds(got[i]!);
    for (let k = i; k < 10; k++) t.true(ids.includes(`user_idle${k}`), `endpoint ${i} has user_idle${k}`);
    // An event routed after a later creation may reach that endpoint too (allowed); never twice.
    t.is(new Set(ids).size, ids.length, `endpoint ${i}: no event twice`);
  }
});
