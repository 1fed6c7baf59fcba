// Issue 8, points 5 and 7 against a real nats-server: Nats-Msg-Id deduplication is per tenant (another
// tenant's event with the same id is delivered; a tenant's retried publish is delivered once, inside and
// outside EVENTS' 100 ms window), and webhook ids are opaque yet stable (retries, replay) and still
// resolve, new and legacy, in admin.deliveries.show.
import test from 'ava';
import { randomBytes } from 'node:crypto';
import type { PubAck } from '@nats-io/jetstream';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver, Responder } from './helpers/receiver.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { createWebhookIdCodec, deriveWebhookIdKey, type WebhookIdCodec } from '../src/domain/webhook-id.ts';
import { EVENTS_STREAM, ROUTER_CONSUMER, ensureEventsStream } from '../streams/events.ts';
import { nanos } from '@nats-io/nats-core';

let h: TestService;
let admin: AdminClient;
let webhookIds: WebhookIdCodec;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function subscribed(tenant: string, respond: Responder = () => 200) {
  const r = await h.receiver(respond);
  const { endpoint } = await h.store.create(tenant as TenantId, { url: r.url, events: ['user.*'] });
  return { r, endpoint: endpoint.id };
}

const publish = (tenant: string, data: unknown, msgID?: string) =>
  h.publish(tenant, 'user.updated', data, msgID ? { msgID } : {});

/** Resolves once the router has acked every event up to `seq` (its fan-out is stored or was dropped as a duplicate). */
const routed = (seq: number) => eventually(async () => {
  const info = await h.service.jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER);
  return info.ack_floor.stream_seq >= seq ? true : undefined;
}, 10_000, `router past EVENTS #${seq}`);

/**
 * Everything `r` will get from events up to now: a sentinel event without an id is routed after the
 * others, and once it arrived (and a moment more for an earlier one sent alongside) nothing earlier is on its way.
 */
async function settle(tenant: string, r: Receiver): Promise<Receiver['received']> {
  const ack = await publish(tenant, { userId: 'user_sentinel' });
  await routed(ack.seq);
  await eventually(() => (r.received.some((x) => x.body.includes('user_sentinel')) ? true : undefined), 10_000, 'sentinel');
  await sleep(300);
  return r.received.filter((x) => !x.body.includes('user_sentinel'));
}

test.before(async () => {
  h = await startTestService('dedupe_ids', { HOOKSTREAM_RETRY_SCHEDULE: '300ms,600ms', HOOKSTREAM_ATTEMPT_TIMEOUT: '2s' });
  ({ admin } = await h.operator({ timeoutMs: 20_000 }));
  webhookIds = createWebhookIdCodec(deriveWebhookIdKey(Buffer.from(h.keys.masterKey, 'base64')));
});

test.after.always(() => h?.closeAll());

test.serial('EVENTS keeps the 100 ms minimum duplicate window, and an existing stream with the old 2 minutes is updated', async (t) => {
  const { jsm } = h.service;
  t.is((await jsm.streams.info(EVENTS_STREAM)).config.duplicate_window, nanos(100));
  const config = (await jsm.streams.info(EVENTS_STREAM)).config;
  await jsm.streams.update(EVENTS_STREAM, { ...config, duplicate_window: nanos(120_000) });
  t.is((await jsm.streams.info(EVENTS_STREAM)).config.duplicate_window, nanos(120_000));
  // The service's own partitions and direct delivery: both are fixed once set (TEST_DIRECT_DELIVERY=1).
  await ensureEventsStream(jsm, undefined, h.config.eventPartitions, h.config.directDelivery ? { on: true, retentionMs: h.config.queueRetentionMs, consumersLeft: async () => 0 } : undefined);
  t.is((await jsm.streams.info(EVENTS_STREAM)).config.duplicate_window, nanos(100));
});

test.serial("another tenant's event with the same Nats-Msg-Id is delivered", async (t) => {
  const a = await subscribed('tenant_dup_a');
  const b = await subscribed('tenant_dup_b');
  const first = await publish('tenant_dup_a', { userId: 'user_a' }, 'order-1');
  await a.r.waitFor(1);
  await sleep(250); // past EVENTS' window; well inside the old 2 minutes
  const second = await publish('tenant_dup_b', { userId: 'user_b' }, 'order-1');
  t.false(second.duplicate, 'stored, not dropped as a duplicate of the other tenant');
  t.not(second.seq, first.seq);
  const [got] = await b.r.waitFor(1, 10_000);
  t.deepEqual(JSON.parse(got!.body), { type: 'user.updated', data: { userId: 'user_b' } });
  t.is((await settle('tenant_dup_a', a.r)).length, 1, "tenant A's endpoint got its own event only");
});

test.serial("a tenant's retried publish reaches its endpoint once, inside and outside EVENTS' 100 ms window", async (t) => {
  const { r } = await subscribed('tenant_retry');
  // Inside the window: JetStream itself drops the repeat.
  const inside = await publish('tenant_retry', { userId: 'user_1' }, 'evt-inside');
  const insideAgain = await publish('tenant_retry', { userId: 'user_1' }, 'evt-inside');
  // Outside it (the producer retried after a lost ack): stored twice, fanned out once.
  const outside = await publish('tenant_retry', { userId: 'user_2' }, 'evt-outside');
  await r.waitFor(2, 10_000);
  await sleep(250);
  const outsideAgain = await publish('tenant_retry', { userId: 'user_2' }, 'evt-outside');
  t.false(outsideAgain.duplicate);
  t.true(outsideAgain.seq > outside.seq, 'the retry is a second EVENTS message');
  await routed(outsideAgain.seq);

  const got = await settle('tenant_retry', r);
  const bodies = got.map((x) => (JSON.parse(x.body) as { data: { userId: string } }).data.userId).sort();
  t.deepEqual(bodies, ['user_1', 'user_2'], 'each event once');
  // The delivered copy is the first: its webhook-id is the first EVENTS message's.
  const user2 = got.find((x) => x.body.includes('user_2'))!;
  t.deepEqual(webhookIds.decode(String(user2.headers['webhook-id']))?.seq, outside.seq);
  // Whether EVENTS dropped the inside repeat (the usual case) or a slow machine stored it twice, it went out once.
  t.log(`inside repeat: ${insideAgain.duplicate ? 'dropped by EVENTS' : `stored as #${insideAgain.seq} after #${inside.seq}`}`);
});

test.serial('webhook ids of consecutive events are opaque: not ordered, not decodable without the key', async (t) => {
  const { r } = await subscribed('tenant_ids');
  const acks: PubAck[] = [];
  for (let i = 0; i < 12; i++) acks.push(await publish('tenant_ids', { userId: `user_${i}` }));
  await r.waitFor(12, 10_000);
  const idOf = new Map(r.received.map((x) => [(JSON.parse(x.body) as { data: { userId: string } }).data.userId, String(x.headers['webhook-id'])]));
  const ids = acks.map((_, i) => idOf.get(`user_${i}`)!);
  for (const id of ids) t.regex(id, /^msg_[0-9a-hjkmnp-tv-z]{26}$/);
  t.notDeepEqual([...ids].sort(), ids, 'not in publish order');
  t.deepEqual(ids.map((id) => webhookIds.decode(id)?.seq), acks.map((a) => a.seq), 'the right key gives the EVENTS sequences');
  const other = createWebhookIdCodec(deriveWebhookIdKey(randomBytes(32)));
  t.true(ids.every((id, i) => other.decode(id)?.seq !== acks[i]!.seq), 'another key does not');
});

test.serial('the webhook-id is the same on every retry and after a dead-letter replay', async (t) => {
  let healthy = false;
  const { r, endpoint } = await subscribed('tenant_replay_id', () => (healthy ? 200 : 500));
  const ack = await publish('tenant_replay_id', { userId: 'user_r' });
  const [letter] = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint, status: 'dead' });
    return page.data.length > 0 ? page.data : undefined;
  }, 20_000, 'dead letter');
  t.is(r.received.length, 3);
  const ids = new Set(r.received.map((x) => String(x.headers['webhook-id'])));
  t.is(ids.size, 1, 'one id for the first attempt and both retries');
  const id = String(r.received[0]!.headers['webhook-id']);
  t.is(letter!.webhook_id, id);
  t.is(webhookIds.decode(id)?.seq, ack.seq);
  healthy = true;
  await admin.replayDeadLetter({ id: letter!.id });
  const replayed = (await r.waitFor(4, 10_000))[3]!;
  t.is(replayed.headers['webhook-id'], id);
});

test.serial('deliveries show finds the event for a new-format id, a legacy id, and not for an id under another key', async (t) => {
  const { r, endpoint } = await subscribed('tenant_show');
  const ack = await publish('tenant_show', { userId: 'user_s' });
  const [got] = await r.waitFor(1, 10_000);
  const current = String(got!.headers['webhook-id']);
  const stored = (await h.service.jsm.streams.getMessage(EVENTS_STREAM, { seq: ack.seq }))!;
  const ms = stored.time.getTime();
  t.is(current, webhookIds.encode({ seq: ack.seq, ms: Date.parse((await h.service.jsm.streams.info(EVENTS_STREAM)).created) }), 'the event\'s sequence and EVENTS\' creation time');
  // Ids handed out before ids named EVENTS' creation time: the event's own time.
  t.like(await admin.showDelivery({ webhook_id: webhookIds.encode({ seq: ack.seq, ms }), endpoint }), { tenant: 'tenant_show', event_type: 'user.updated' });

  const shown = await eventually(async () => {
    const s = await admin.showDelivery({ webhook_id: current, endpoint });
    return s.state === 'acknowledged' ? s : undefined;
  }, 10_000, 'acknowledged');
  t.like(shown, { tenant: 'tenant_show', event_type: 'user.updated' });

  // Ids handed out before this change: `msg_` + base-36 time (9) + sequence (8).
  const legacy = `msg_${ms.toString(36).padStart(9, '0')}${ack.seq.toString(36).padStart(8, '0')}`;
  t.like(await admin.showDelivery({ webhook_id: legacy, endpoint }), { state: 'acknowledged', tenant: 'tenant_show', event_type: 'user.updated' });

  const foreign = createWebhookIdCodec(deriveWebhookIdKey(randomBytes(32))).encode({ seq: ack.seq, ms });
  const unknown = await admin.showDelivery({ webhook_id: foreign, endpoint });
  t.is(unknown.event_type, null, 'an id under another key points at no event');
  t.not(unknown.state, 'acknowledged');
});
