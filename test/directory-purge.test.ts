// The endpoint directory when events leave the ENDPOINTS stream (issue 8, point 6): a purge, as an
// attacker with the old producer credential could do, or a deleted last message. The directory never
// waits for a sequence that will not come: delivery goes on for endpoints created afterwards, /readyz on
// the ops listener answers, stop() returns, and a restart becomes ready. Real nats-server and Postgres.
import test from 'ava';
import { jetstreamManager, type JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { connectNats } from '../src/nats/connect.ts';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { startEndpointDirectory } from '../src/endpoints/directory.ts';
import { ENDPOINTS_STREAM } from '../streams/endpoints.ts';
import { createLogger } from '../src/log.ts';
import type { TenantId } from '../src/domain/ids.ts';

let h: TestService;
/** The test's own connection: it outlives the service's across stops and restarts. */
let nc: NatsConnection;
let jsm: JetStreamManager;
const lines: string[] = [];

/** Rejects when `p` has not settled within `ms`: a hang detector, not a timing target. */
const settles = <T>(p: Promise<T>, ms: number, what: string) => {
  let timer: NodeJS.Timeout | undefined;
  const hang = new Promise<never>((_, reject) => { timer = setTimeout(() => reject(new Error(`${what} did not settle within ${ms} ms`)), ms); });
  return Promise.race([p, hang]).finally(() => clearTimeout(timer));
};

const readyz = async () => {
  const res = await fetch(`${h.service.opsUrl}/readyz`);
  return { status: res.status, body: await res.json() as { status: string; checks: { name: string; ok: boolean; detail?: string }[] } };
};

/** A fresh endpoint on a fresh tenant receives an event: the directory and the router are live. */
async function deliveryWorks(t: { is: (a: unknown, b: unknown, m?: string) => void }, tenant: string): Promise<void> {
  const r = await h.receiver();
  const { endpoint } = await h.store.create(tenant as TenantId, { url: r.url, events: ['user.*'] });
  await h.publish(tenant, 'user.created', { userId: `user_${tenant}` });
  const [got] = await r.waitFor(1, 20_000);
  t.is(JSON.parse(got!.body).data.userId, `user_${tenant}`);
  t.is(h.service.directory!.get(endpoint.id)?.id, endpoint.id);
}

test.before(async () => {
  h = await startTestService('directory_purge', { HOOKSTREAM_RETRY_SCHEDULE: '300ms,600ms', HOOKSTREAM_LOG_LEVEL: 'warn' }, {
    logWrite: (line) => lines.push(line),
  });
  nc = await connectNats({ url: h.nats.url, name: 'directory-purge-test' });
  jsm = await jetstreamManager(nc);
});

test.after.always(async () => {
  await nc?.close();
  await h?.closeAll();
});

test.serial('a purge of ENDPOINTS while the service runs: it stays live, forgets the purged endpoints, and stops promptly', async (t) => {
  const before = await h.receiver();
  const { endpoint: purged } = await h.store.create('tenant_before_purge' as TenantId, { url: before.url, events: ['user.*'] });
  await h.publish('tenant_before_purge', 'user.created', { userId: 'user_0' });
  await before.waitFor(1);

  await jsm.streams.purge(ENDPOINTS_STREAM);
  await deliveryWorks(t, 'tenant_after_purge');

  // The stream is the source of truth: what was purged is gone from the directory, and gets nothing more.
  await eventually(() => (h.service.directory!.get(purged.id) === undefined ? true : undefined), 10_000, 'purged endpoint forgotten');
  await h.publish('tenant_before_purge', 'user.created', { userId: 'user_1' });
  await deliveryWorks(t, 'tenant_after_purge_2'); // routed after the event above
  t.is(before.received.length, 1, 'the purged endpoint receives nothing more');
  t.true(lines.some((l) => l.includes('endpoint directory rebuilt')), 'the rebuild is logged');

  const ready = await readyz();
  t.is(ready.status, 200, JSON.stringify(ready.body));
  await settles(h.service.stop(), 10_000, 'service.stop() after a purge');
  await h.restart();
});

test.serial('a restart after a purge becomes ready and delivers', async (t) => {
  const r = await h.receiver();
  await h.store.create('tenant_purged_again' as TenantId, { url: r.url, events: ['user.*'] });
  await settles(h.service.stop(), 10_000, 'service.stop()');
  // Purged while the service is down: the stream's last sequence is no longer stored when it starts.
  await jsm.streams.purge(ENDPOINTS_STREAM);
  await settles(h.restart(), 30_000, 'a restart after a purge');
  t.is((await readyz()).status, 200);
  await deliveryWorks(t, 'tenant_after_restart');
});

test.serial('a deleted last message: the directory does not wait for it, delivery goes on, stop is prompt', async (t) => {
  const r = await h.receiver();
  const { endpoint } = await h.store.create('tenant_deleted_last' as TenantId, { url: r.url, events: ['user.*'] });
  const { state } = await jsm.streams.info(ENDPOINTS_STREAM);
  t.is(h.service.directory!.get(endpoint.id)?.version, state.last_seq, 'its created event is the last message');
  t.true(await jsm.streams.deleteMessage(ENDPOINTS_STREAM, state.last_seq));

  await deliveryWorks(t, 'tenant_after_delete');
  // The sync that sees the removal rebuilds the directory behind the delivery (the first routing does not
  // wait for it), so the swap may come a moment after the receipt.
  await eventually(() => (h.service.directory!.get(endpoint.id) === undefined ? true : undefined), 10_000, 'the directory to drop the endpoint whose only event is gone');
  t.is(h.service.directory!.get(endpoint.id), undefined, 'an endpoint whose only event is gone is gone');
  t.is((await readyz()).status, 200);

  // Deleted while the service is down, then started: the last sequence it reads is not stored any more.
  await settles(h.service.stop(), 10_000, 'service.stop() after a deleted message');
  const last = (await jsm.streams.info(ENDPOINTS_STREAM)).state.last_seq;
  t.true(await jsm.streams.deleteMessage(ENDPOINTS_STREAM, last));
  await settles(h.restart(), 30_000, 'a restart after a deleted last message');
  t.is((await readyz()).status, 200);
  await deliveryWorks(t, 'tenant_after_delete_restart');
  await settles(h.service.stop(), 10_000, 'service.stop()');
  await h.restart();
});

test.serial('sync() skips sequences no longer stored and stop() ends a sync that is waiting', async (t) => {
  const quiet = createLogger({ level: 'error', write: () => {} });
  const d = await startEndpointDirectory({ js: h.service.js, jsm: h.service.jsm, log: quiet, options: { stallMs: 60_000, probeMs: 50 } });
  try {
    // Two events stored and at once removed: the consumer never sees them; sync() must not wait for them.
    const r = await h.receiver();
    const a = await h.store.create('tenant_sync_a' as TenantId, { url: r.url, events: ['user.*'] });
    const b = await h.store.create('tenant_sync_b' as TenantId, { url: r.url, events: ['user.*'] });
    await jsm.streams.deleteMessage(ENDPOINTS_STREAM, b.seq);
    await settles(d.sync(), 10_000, 'sync() over a deleted last message');
    t.true(d.lastSeq() >= b.seq);
    t.is(d.get(a.endpoint.id)?.id, a.endpoint.id);
  } finally {
    await settles(d.stop(), 10_000, 'directory stop()');
  }
  await t.throwsAsync(d.sync(), { message: /stopped/ });

  // A sync that cannot finish (NATS is gone) ends when the directory stops.
  const d2 = await startEndpointDirectory({ js: h.service.js, jsm: h.service.jsm, log: quiet });
  await h.nats.stop();
  try {
    const waiting = d2.sync();
    waiting.catch(() => {});
    await new Promise((res) => setTimeout(res, 200));
    await settles(d2.stop(), 5_000, 'stop() while a sync waits');
    await t.throwsAsync(settles(waiting, 5_000, 'the waiting sync'));
  } finally {
    await h.nats.start();
  }
});
