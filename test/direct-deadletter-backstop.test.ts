// The dead-letter backstop of direct delivery (src/deadletter/direct-backstop.ts): a copy in a partition
// stream that dies while its max-deliveries advisory is lost (the advisory stream captures nothing) still
// becomes one dead letter, found from its final attempt record, shown and replayed as any other; one whose
// advisory arrives is not buried again by the backstop. Real NATS, Postgres, the delivery and dead-letter
// roles with direct delivery on, and receivers that fail. And, in a dead-letter role of its own with no
// router, a dead copy's body sealed under a data key that role writes.
import test from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { AdminClient } from '../src/admin/client.ts';
import { ADVISORIES_STREAM } from '../streams/dead-letters.ts';
import { ATTEMPTS_STREAM, attemptSubject, type AttemptRecord } from '../streams/attempts.ts';
import { partitionStream } from '../streams/events.ts';
import { tenantPartition } from '../src/domain/partition.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';
import { loadConfig } from '../src/config.ts';
import { startService } from '../src/service.ts';
import { openDeadLetter } from '../src/crypto/sodium.ts';
import { parseOriginalMessage } from '../src/deadletter/sealed-message.ts';
import { isSealedBody } from '../src/erasure/data-keys.ts';

const PARTITIONS = 4;
const ENV = {
  HOOKSTREAM_RETRY_SCHEDULE: '200ms,200ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '1s', HOOKSTREAM_DEAD_LETTER_BACKSTOP: '1s',
  HOOKSTREAM_EVENT_PARTITIONS: String(PARTITIONS), HOOKSTREAM_DIRECT_DELIVERY: '1',
};
let h: TestService;
let admin: AdminClient;
const logLines: string[] = [];

test.before(async () => {
  h = await startTestService('direct_dl_backstop', {
    ...ENV,
    // An endpoint's first death is a warning line, which says whether the backstop found it.
    HOOKSTREAM_LOG_LEVEL: 'warn',
  }, { logWrite: (line) => { logLines.push(line); } });
  ({ admin } = await h.operator({ timeoutMs: 60_000 }));
});
test.after.always(() => h?.closeAll());

const deadLetters = (endpoint: EndpointId) => h.service.orm!.em.fork().getConnection().execute<{ id: string; dead_count: number; status: string; source_stream: string }[]>(
  'select id, dead_count, status, source_stream from dead_letters where endpoint_id = ?', [endpoint]);

/** The last attempt record of a delivery, once it is the final one (attempt 3). */
const finalRecord = (endpoint: string, webhookId: string) => eventually(async () => {
  const m = await h.service.jsm.streams.getMessage(ATTEMPTS_STREAM, { last_by_subj: attemptSubject(endpoint, webhookId) }).catch(() => null);
  const r = m?.json<AttemptRecord>();
  return r?.attempt === 3 ? r : undefined;
}, 15_000, 'the final attempt record');

test.serial('a direct copy dead while its advisory is lost: the backstop makes it one dead letter, shown and replayed', async (t) => {
  let healthy = false;
  const r = await h.receiver(() => (healthy ? 200 : 500));
  const tenant = 'tenant_direct_lost' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['*'] });
  const si = await h.service.jsm.streams.info(ADVISORIES_STREAM);
  await h.service.jsm.streams.update(ADVISORIES_STREAM, { ...si.config, subjects: ['hookstream_test.nothing'] });
  // Back as it was: it captures the partition streams' advisories too.
  t.teardown(async () => { await h.service.jsm.streams.update(ADVISORIES_STREAM, si.config); });
  await h.publish(tenant, 'user.deleted', { userId: 'user_lost' });
  await r.waitFor(3, 15_000);
  const webhookId = String(r.received[0]!.headers['webhook-id']);
  const record = await finalRecord(endpoint.id, webhookId);
  t.is(record.copy?.stream, partitionStream(tenantPartition(tenant, PARTITIONS)), 'the final record names the copy it sent');
  t.is((await h.service.jsm.streams.info(ADVISORIES_STREAM)).state.messages, 0, 'no advisory was stored');

  const shown = await eventually(async () => {
    const s = await admin.showDelivery({ webhook_id: webhookId, endpoint: endpoint.id });
    return s.state === 'dead' ? s : undefined;
  }, 15_000, 'the backstop to dead-letter it');
  t.is(shown.attempts, 3);
  t.is(shown.last_status, 500);
  t.is(h.service.metrics.deadLettersBackstop.get(), 1);
  t.truthy(logLines.find((l) => l.includes('dead letter stored') && l.includes(endpoint.id) && l.includes('"found_by":"backstop"')));
  const [row] = await deadLetters(endpoint.id);
  t.is(row?.source_stream, record.copy?.stream, 'made from the copy');
  const letter = await admin.showDeadLetter({ id: row!.id });
  t.deepEqual(letter.message.body, JSON.parse(r.received[0]!.body), 'the dead letter holds the body sent');
  t.is(letter.tag, 'current');

  // Scans go on: still one record, stored once, and nothing sent after its death.
  await new Promise((res) => setTimeout(res, 2500));
  t.deepEqual((await deadLetters(endpoint.id)).map((d) => d.dead_count), [1]);
  t.is(r.received.length, 3);

  healthy = true;
  await admin.replayDeadLetter({ id: row!.id });
  const replayed = (await r.waitFor(4, 15_000))[3]!;
  t.is(replayed.headers['webhook-id'], webhookId);
  t.is(replayed.body, r.received[0]!.body);
});

test.serial('a direct copy whose advisory arrives is not buried again by the backstop, nor made dead again after its replay', async (t) => {
  let healthy = false;
  const r = await h.receiver(() => (healthy ? 200 : 500));
  const tenant = 'tenant_direct_advised' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['*'] });
  const backstopped = h.service.metrics.deadLettersBackstop.get();
  await h.publish(tenant, 'user.deleted', { userId: 'user_advised' });
  await r.waitFor(3, 15_000);
  const webhookId = String(r.received[0]!.headers['webhook-id']);
  await finalRecord(endpoint.id, webhookId);
  const letter = await eventually(async () => (await admin.listDeadLetters({ endpoint: endpoint.id, status: 'dead' })).data[0], 15_000, 'the dead letter');
  // Past the backstop's interval and a few of its scans: the final record is in what it has read.
  await new Promise((res) => setTimeout(res, 3500));
  t.is(h.service.metrics.deadLettersBackstop.get(), backstopped, 'the backstop buried nothing');
  t.falsy(logLines.find((l) => l.includes(endpoint.id) && l.includes('"found_by":"backstop"')));

  healthy = true;
  await admin.replayDeadLetter({ id: letter.id });
  await r.waitFor(4, 15_000);
  await new Promise((res) => setTimeout(res, 2500));
  t.deepEqual((await deadLetters(endpoint.id)).map((d) => [d.dead_count, d.status]), [[1, 'replayed']], 'one record, replayed');
  t.is(h.service.metrics.deadLettersBackstop.get(), backstopped);
});

// Roles apart, as deployed at scale, and no router at all (direct delivery needs none for an endpoint
// without ordering): no process has made the subject's data key, so the dead-letter role writes it.
test.serial('a dead-letter role in a process of its own, no router running: a dead copy\'s body is sealed under a data key it writes', async (t) => {
  await h.restart({ HOOKSTREAM_ROLES: 'delivery,admin,projector' });
  const deadletter = await startService(loadConfig({
    NATS_URL: h.nats.url, DATABASE_URL: h.db.url, PORT: '0', OPS_PORT: '0', CONSOLE_PORT: '0', HOOKSTREAM_DELIVERY_SHARDS: String(h.config.deliveryShards),
    HOOKSTREAM_MASTER_KEY: h.keys.masterKey, HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY: h.keys.deadLetterPublicKey,
    HOOKSTREAM_DEAD_LETTER_SECRET_KEY: h.keys.deadLetterSecretKey, HOOKSTREAM_LOG_LEVEL: 'error', ...ENV, HOOKSTREAM_ROLES: 'deadletter',
  }), h.log);
  t.teardown(() => deadletter.stop());
  const r = await h.receiver(() => 500);
  const tenant = 'tenant_direct_alone' as TenantId;
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['*'] });
  await h.publish(tenant, 'user.deleted', { userId: 'user_alone' });
  await r.waitFor(3, 15_000);
  const letter = await eventually(async () => (await admin.listDeadLetters({ endpoint: endpoint.id, status: 'dead' })).data[0], 15_000, 'the dead letter');
  const [{ sealed }] = await h.service.orm!.em.fork().execute<{ sealed: Buffer }[]>('select sealed from dead_letters where id = ?', [letter.id]) as [{ sealed: Buffer }];
  const body = Buffer.from(parseOriginalMessage(openDeadLetter(h.keys.deadLetterPublicKey, h.keys.deadLetterSecretKey, new Uint8Array(sealed))).body_base64, 'base64');
  t.true(isSealedBody(body), 'sealed under its data key');
  t.deepEqual((await admin.showDeadLetter({ id: letter.id })).message.body, JSON.parse(r.received[0]!.body), 'and shown opened');
});
