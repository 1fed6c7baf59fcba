// No delivery stuck in silence (issue 17, point 2): a delivery whose max-deliveries advisory is lost (the
// advisory stream unable to store it at the moment of death) still ends as exactly one dead letter, found
// by the backstop; and the operational notice of a death comes after its record and its removal from the
// queue. Real NATS, Postgres, delivery and dead-letter roles, and a receiver that always fails.
import test from 'ava';
import { eventually, queuedDeliveries } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { AdminClient } from '../src/admin/client.ts';
import { ADVISORIES_STREAM, ensureDeadLetterStream } from '../streams/dead-letters.ts';
import { ATTEMPTS_STREAM, attemptSubject, type AttemptRecord } from '../streams/attempts.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';

let h: TestService;
let admin: AdminClient;
const logLines: string[] = [];

test.before(async () => {
  h = await startTestService('deadletter_backstop', {
    // The work queues' backstop (direct delivery's: direct-deadletter-backstop.test.ts): pinned to the default path.
    HOOKSTREAM_DIRECT_DELIVERY: '0', HOOKSTREAM_EVENT_PARTITIONS: '0',
    HOOKSTREAM_RETRY_SCHEDULE: '200ms,200ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '1s', HOOKSTREAM_DEAD_LETTER_BACKSTOP: '1s',
  }, { logWrite: (line) => { logLines.push(line); } });
  ({ admin } = await h.operator());
});
test.after.always(() => h?.closeAll());

const queued = (endpoint: EndpointId) => queuedDeliveries(h, endpoint);

const deadLetters = (endpoint: EndpointId) => h.service.orm!.em.fork().getConnection().execute<{ id: string; dead_count: number }[]>(
  'select id, dead_count from dead_letters where endpoint_id = ?', [endpoint]);

test.serial('a lost max-deliveries advisory: the backstop still makes the delivery one dead letter', async (t) => {
  const r = await h.receiver(() => 500);
  const { endpoint } = await h.store.create('tenant_lost_advisory' as TenantId, { url: r.url, events: ['*'] });
  // The advisory stream captures nothing while the delivery dies: its advisory is published to no one.
  const si = await h.service.jsm.streams.info(ADVISORIES_STREAM);
  await h.service.jsm.streams.update(ADVISORIES_STREAM, { ...si.config, subjects: ['hookstream_test.nothing'] });
  await h.publish('tenant_lost_advisory', 'user.deleted', { userId: 'user_1' });
  await r.waitFor(3, 10_000);
  const webhookId = String(r.received[0]!.headers['webhook-id']);
  await new Promise((res) => setTimeout(res, 1000));
  t.is((await h.service.jsm.streams.info(ADVISORIES_STREAM)).state.messages, 0, 'no advisory was stored');
  t.is(await queued(endpoint.id), 1, 'the dead delivery sits in its queue');
  await ensureDeadLetterStream(h.service.jsm, h.config.deliveryShards);

  const shown = await eventually(async () => {
    const s = await admin.showDelivery({ webhook_id: webhookId, endpoint: endpoint.id });
    return s.state === 'dead' ? s : undefined;
  }, 15_000, 'the backstop to dead-letter it');
  t.is(shown.attempts, 3);
  t.is(shown.last_status, 500);
  t.is(await queued(endpoint.id), 0, 'removed from its queue');
  t.is(h.service.metrics.deadLettersBackstop.get(), 1);
  await new Promise((res) => setTimeout(res, 2500));
  t.deepEqual((await deadLetters(endpoint.id)).map((d) => d.dead_count), [1], 'one record, stored once');
  t.is(r.received.length, 3, 'no attempt after its death');
});

test.serial('the notice of a death comes after its record and its removal from the queue', async (t) => {
  const r = await h.receiver(() => 500);
  const tenant = 'tenant_notice' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['*'] });
  const seenAt: { rows: number; queued: number }[] = [];
  const sub = h.service.nc.subscribe(`ops.${tenant}.message.attempt.exhausted`, {
    callback: () => {
      // What the notice's reader would find at that moment.
      void Promise.all([deadLetters(endpoint.id), queued(endpoint.id)]).then(([rows, q]) => seenAt.push({ rows: rows.length, queued: q }));
    },
  });
  t.teardown(() => sub.unsubscribe());
  await h.publish(tenant, 'user.deleted', { userId: 'user_2' });
  await eventually(() => (seenAt.length > 0 ? true : undefined), 15_000, 'the exhausted notice');
  t.deepEqual(seenAt[0], { rows: 1, queued: 0 });
});

test.serial('an ordered endpoint: a keyed head whose advisory is lost is dead-lettered by the backstop, and its key goes on', async (t) => {
  const r = await h.receiver((req) => (JSON.parse(req.body).data.n === 0 ? 500 : 200));
  const tenant = 'tenant_lost_keyed' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['*'], ordering: 'key' });
  const si = await h.service.jsm.streams.info(ADVISORIES_STREAM);
  await h.service.jsm.streams.update(ADVISORIES_STREAM, { ...si.config, subjects: ['hookstream_test.nothing'] });
  await h.publish(tenant, 'user.deleted', { userId: 'user_k', n: 0 });
  await h.publish(tenant, 'user.deleted', { userId: 'user_k', n: 1 });
  await r.waitFor(3, 10_000);
  await new Promise((res) => setTimeout(res, 1000));
  t.is((await h.service.jsm.streams.info(ADVISORIES_STREAM)).state.messages, 0, 'no advisory was stored');
  t.false(r.received.some((x) => JSON.parse(x.body).data.n === 1), 'the next one of the key waits behind its dead head');
  await ensureDeadLetterStream(h.service.jsm, h.config.deliveryShards);
  await eventually(() => (r.received.some((x) => JSON.parse(x.body).data.n === 1) ? true : undefined), 15_000, 'the key to go on after the backstop');
  t.deepEqual((await deadLetters(endpoint.id)).map((d) => d.dead_count), [1], 'the head is one dead letter');
});

// A shortfall no death explains (here: a dead delivery whose advisory and attempt records are both gone, so
// the backstop cannot tell it died) is what diverged replicas look like: after three scans it is shown in
// the divergence gauge and an error line, and the consumer's leader is asked to step down (a single server
// refuses; a cluster hands the consumer to another server).
test.serial('a delivery its consumer neither holds nor explains: divergence shown, the consumer\'s leader asked to step down', async (t) => {
  const r = await h.receiver(() => 500);
  const tenant = 'tenant_diverged' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['*'] });
  const si = await h.service.jsm.streams.info(ADVISORIES_STREAM);
  await h.service.jsm.streams.update(ADVISORIES_STREAM, { ...si.config, subjects: ['hookstream_test.nothing'] });
  t.teardown(() => ensureDeadLetterStream(h.service.jsm, h.config.deliveryShards));
  await h.publish(tenant, 'user.deleted', { userId: 'user_d' });
  await r.waitFor(3, 10_000);
  const subject = attemptSubject(endpoint.id, String(r.received[0]!.headers['webhook-id']));
  await eventually(async () => {
    const m = await h.service.jsm.streams.getMessage(ATTEMPTS_STREAM, { last_by_subj: subject }).catch(() => null);
    return m && m.json<AttemptRecord>().attempt === 3 ? true : undefined;
  }, 15_000, 'the last attempt record');
  await h.service.jsm.streams.purge(ATTEMPTS_STREAM, { filter: subject });

  const gauge = await eventually(() => {
    const line = h.service.metrics.registry.render().split('\n').find((l) => l.startsWith('hookstream_delivery_consumer_divergence{') && l.includes(endpoint.id));
    return line;
  }, 20_000, 'the divergence gauge');
  t.regex(gauge, / 1$/);
  const said = await eventually(() => logLines.find((l) => l.includes('its replicas may have diverged') && l.includes(endpoint.id)), 10_000, 'the error line');
  const fields = JSON.parse(said) as { level: string; stored: number; pending: number; ack_pending: number; stepdown: string };
  t.like(fields, { level: 'error', stored: 1, pending: 0, ack_pending: 0 });
  t.log(`stepdown: ${fields.stepdown}`);
  t.regex(fields.stepdown, /^(done|refused: .+)$/, 'the server answered the stepdown request');
  t.is(await queued(endpoint.id), 1, 'the delivery is still stored');
});
