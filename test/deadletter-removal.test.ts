// Removing a dead message from its work queue (issue 8, point 7): a failed removal is retried (the
// advisory is not acked until the message is gone), an "already gone" one is not, and either way there is
// exactly one dead letter. Real NATS, Postgres, delivery role and receiver; the dead-letter handler runs
// here over a JetStreamManager whose deleteMessage the test controls.
import test from 'ava';
import type { JetStreamManager } from '@nats-io/jetstream';
import { startHarness, eventually, type Harness, queuedDeliveries } from './helpers/service.ts';
import { startReceiver, type Receiver } from './helpers/receiver.ts';
import { startDeadLetterHandler, type DeadLetterHandler } from '../src/deadletter/handler.ts';
import { sealForDeadLetters } from '../src/crypto/sodium.ts';
import { deadLetterTaggerOf } from '../src/deadletter/tag.ts';
import { ADVISORIES_STREAM, DEAD_LETTER_CONSUMER } from '../streams/dead-letters.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';

let h: Harness;
let r: Receiver;
let handler: DeadLetterHandler;
/** Every deleteMessage the handler made, and what the test makes of the next ones. */
const deletes: { stream: string; seq: number }[] = [];
let onDelete: (jsm: JetStreamManager, stream: string, seq: number) => Promise<boolean> = (jsm, stream, seq) => jsm.streams.deleteMessage(stream, seq);

test.before(async () => {
  // No deadletter role in the service: this file's handler is the only one reading the advisories.
  h = await startHarness('deadletter-removal', {
    HOOKSTREAM_ROLES: 'router,delivery,projector', HOOKSTREAM_RETRY_SCHEDULE: '200ms,200ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '1s',
  });
  r = await startReceiver(() => 500);
  const jsm = h.service.jsm;
  const streams = Object.create(jsm.streams) as JetStreamManager['streams'];
  streams.deleteMessage = async (stream: string, seq: number) => {
    deletes.push({ stream, seq });
    return onDelete(jsm, stream, seq);
  };
  const wrapped = Object.create(jsm, { streams: { value: streams } }) as JetStreamManager;
  handler = await startDeadLetterHandler({
    js: h.service.js, jsm: wrapped, orm: h.service.orm!, log: h.log, metrics: h.service.metrics,
    sealer: { seal: (b) => sealForDeadLetters(h.keys.deadLetterPublicKey, b), tag: deadLetterTaggerOf(h.keys.masterKey).tag }, retryDelayMs: 300,
  });
});
test.after.always(async () => {
  await handler?.stop();
  await r?.close();
  await h?.close();
});

const deadLetters = (endpoint: EndpointId) => h.service.orm!.em.fork().getConnection().execute<{ dead_count: number; source_seq: string | number }[]>(
  'select dead_count, source_seq from dead_letters where endpoint_id = ?', [endpoint]);

const queued = (endpoint: EndpointId) => queuedDeliveries(h, endpoint);

async function advisoriesSettled(): Promise<true | undefined> {
  const info = await h.service.jsm.consumers.info(ADVISORIES_STREAM, DEAD_LETTER_CONSUMER);
  return info.num_pending === 0 && info.num_ack_pending === 0 ? true : undefined;
}

async function killOne(tenant: string): Promise<EndpointId> {
  const { endpoint } = await h.store.create(tenant as TenantId, { url: r.url, events: ['user.banned'] });
  await h.service.js.publish(`events.${tenant}.user.banned`, JSON.stringify({ userId: 'user_1' }));
  return endpoint.id;
}

test.serial('a removal that fails is retried until the message is gone: the advisory is not acked before, one dead letter', async (t) => {
  let failed = 0;
  onDelete = async (jsm, stream, seq) => {
    if (failed++ === 0) throw new Error('test: delete refused'); // the message stays: a real failure
    return jsm.streams.deleteMessage(stream, seq);
  };
  const from = deletes.length;
  const endpoint = await killOne('tenant_refused');
  await eventually(async () => (await deadLetters(endpoint)).length > 0 || undefined, 20_000, 'dead letter');
  await eventually(async () => (await queued(endpoint)) === 0 || undefined, 20_000, 'message removed');
  await eventually(advisoriesSettled, 10_000, 'advisory acked');
  const calls = deletes.slice(from);
  t.is(calls.length, 2, 'the failed removal was tried again');
  t.deepEqual(calls[0], calls[1], 'the same message both times');
  const rows = await deadLetters(endpoint);
  t.is(rows.length, 1);
  t.is(rows[0]!.dead_count, 1, 'the retry found its own record: not counted as a second death');
  t.is(Number(rows[0]!.source_seq), calls[0]!.seq);
});

test.serial('a removal that errs because the message is already gone is not retried', async (t) => {
  onDelete = async (jsm, stream, seq) => {
    await jsm.streams.deleteMessage(stream, seq); // removed meanwhile (say by a purge), then an error
    throw new Error('test: no message found');
  };
  const from = deletes.length;
  const endpoint = await killOne('tenant_gone');
  await eventually(async () => (await deadLetters(endpoint)).length > 0 || undefined, 20_000, 'dead letter');
  await eventually(advisoriesSettled, 10_000, 'advisory acked');
  await new Promise((res) => setTimeout(res, 600)); // two retry delays: none comes
  t.is(deletes.length - from, 1);
  t.is(await queued(endpoint), 0);
  t.is((await deadLetters(endpoint)).length, 1);
});
