// What a partition stream's copy of an event becomes for an endpoint (src/delivery/direct-events.ts), with
// no server: only the endpoint's tenant and types are taken, an event the router refuses is never sent,
// and an event is made once per process whatever the number of its endpoints.
import test from 'ava';
import { randomBytes } from 'node:crypto';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { createDirectEvents, KEPT_BYTES } from '../src/delivery/direct-events.ts';
import { createWebhookIdCodec } from '../src/domain/webhook-id.ts';
import { DEFAULT_EVENT_LIMITS } from '../src/domain/event-data.ts';
import { scopedProducerId } from '../src/domain/producer-id.ts';
import { applyEndpointEvent, DisabledReason, Ordering } from '../src/domain/endpoint.ts';
import type { EndpointId, TenantId } from '../src/domain/ids.ts';
import { stateToRow } from '../src/db/endpoint-rows.ts';

const webhookIds = createWebhookIdCodec(randomBytes(16));
const EPOCH = Date.parse('2026-11-29T00:00:00Z');
const direct = createDirectEvents({ webhookIds, epochMs: EPOCH, limits: DEFAULT_EVENT_LIMITS });

/** A copy of the event stored at EVENTS `seq`, as nats-server sources it into a partition stream. */
function copy(seq: number, subject: string, body: unknown, extra: Record<string, string> = {}) {
  const headers = natsHeaders();
  headers.set('Nats-Stream-Source', `EVENTS ${seq} events.*.2.> events.*.> events.*.>`);
  for (const [k, v] of Object.entries(extra)) headers.set(k, v);
  return { subject, data: new TextEncoder().encode(typeof body === 'string' ? body : JSON.stringify(body)), headers };
}

test('only the endpoint\'s tenant and types are taken, by the subject', (t) => {
  const endpoint = { tenant: 't_a', events: ['user.*', 'organization.created'] as const };
  t.true(direct.taken({ subject: 'events.t_a.2.user.created' }, endpoint));
  t.true(direct.taken({ subject: 'events.t_a.2.organization.created' }, endpoint));
  t.false(direct.taken({ subject: 'events.t_a.2.organization.deleted' }, endpoint), 'a type it does not take');
  t.false(direct.taken({ subject: 'events.t_ab.2.user.created' }, endpoint), 'another tenant whose id starts alike');
  t.false(direct.taken({ subject: 'events.t_b.2.user.created' }, endpoint), 'another tenant of the partition');
  t.false(direct.taken({ subject: 'events.t_a' }, endpoint));
  t.true(direct.is({ info: { stream: 'EVENTS_3', consumer: 'ep', deliveryCount: 1, streamSequence: 1 } }));
  t.false(direct.is({ info: { stream: 'DELIVERIES_3', consumer: 'ep', deliveryCount: 1, streamSequence: 1 } }));
});

test('the body and webhook-id are the router\'s, made once per event; an event the router refuses is not sent', (t) => {
  const e = direct.of(copy(41, 'events.t_a.2.user.created', { userId: 'user_1' }))!;
  t.deepEqual(JSON.parse(e.body.toString()), { type: 'user.created', data: { userId: 'user_1' } });
  t.is(e.event, 'user.created');
  t.deepEqual(webhookIds.decode(e.webhookId), { seq: 41, ms: EPOCH });
  t.is(direct.of(copy(41, 'events.t_a.2.user.created', { userId: 'user_1' })), e, 'the same event for another endpoint');

  t.is(direct.of(copy(42, 'events.t_a.2.user.created', '{not json')), undefined);
  t.is(direct.of(copy(43, 'events.t_a.2.user.created', { userId: 42 })), undefined, 'invalid data');
  t.is(direct.of(copy(44, 'events.t_a.2.user.nonsense', {})), undefined, 'an unknown event');
  t.is(direct.of(copy(45, 'events.t_a.2.user.updated', { userId: 'user_1' }, { 'Hookstream-Ordering-Key': 'x'.repeat(1000) })), undefined, 'an ordering key too long');
  const noSource = copy(46, 'events.t_a.2.user.updated', { userId: 'user_1' });
  noSource.headers.delete('Nats-Stream-Source');
  t.is(direct.of(noSource), undefined, 'not a copy nats-server made');
});

test('what is kept made is bounded by bytes too: events of the largest size push the oldest out (made again if asked)', (t) => {
  const own = createDirectEvents({ webhookIds, epochMs: EPOCH, limits: DEFAULT_EVENT_LIMITS });
  const big = { userId: 'user_1', name: 'x'.repeat(200 * 1024) };
  const first = own.of(copy(1, 'events.t_a.2.user.created', big))!;
  t.is(own.of(copy(1, 'events.t_a.2.user.created', big)), first, 'kept while the budget holds it');
  // Past the byte budget by one event, far below the count bound.
  const fill = Math.ceil(KEPT_BYTES / first.body.byteLength);
  for (let seq = 2; seq <= fill + 1; seq++) own.of(copy(seq, 'events.t_a.2.user.created', big));
  const again = own.of(copy(1, 'events.t_a.2.user.created', big))!;
  t.not(again, first, 'pushed out, so made again');
  t.is(again.webhookId, first.webhookId);
  // Small events of the same process are kept as before.
  const small = own.of(copy(9_000, 'events.t_a.2.user.created', { userId: 'user_2' }))!;
  t.is(own.of(copy(9_000, 'events.t_a.2.user.created', { userId: 'user_2' })), small);
});

test('a copy names the producer\'s id scoped to its tenant, and no id when the producer set none', (t) => {
  const tenant = 'tenant_d';
  const withId = direct.of(copy(301, `events.${tenant}.2.user.created`, { userId: 'user_1' }, { 'Nats-Msg-Id': 'order-9' }));
  t.is(withId?.producerId, scopedProducerId(tenant, 'order-9'));
  t.not(withId?.producerId, scopedProducerId('tenant_e', 'order-9'));
  t.is(withId?.seq, 301);
  t.is(direct.of(copy(302, `events.${tenant}.2.user.created`, { userId: 'user_1' }))?.producerId, undefined);
});

test('the fold names the ENDPOINTS event that made an endpoint ordered (direct delivery cuts there), and no later one', (t) => {
  const id = 'webhook_01jorder' as EndpointId;
  const at = '2026-01-01T00:00:00.000Z';
  let s = applyEndpointEvent(undefined, { v: 1, type: 'endpoint.created', id, tenant: 't' as TenantId, url: 'https://a.example.com', events: ['*'], description: null, secret: 's', at }, 1);
  t.is(s.orderedSince, undefined);
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.updated', id, ordering: Ordering.Key, at }, 2);
  t.is(s.orderedSince, 2);
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.updated', id, url: 'https://b.example.com', ordering: Ordering.Key, at }, 3);
  t.is(s.orderedSince, 2, 'still ordered: the switch stays where it was');
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.updated', id, ordering: Ordering.None, at }, 4);
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.updated', id, ordering: Ordering.Key, at }, 5);
  t.is(s.orderedSince, 5);
  t.false('orderedSince' in stateToRow(s), 'not a column of the projection');
});

test('the fold keeps where an endpoint\'s direct consumer starts: EVENTS\' sequence carried by its creation, a restore after a delete, and a switch back to no ordering', (t) => {
  const id = 'webhook_01jstart' as EndpointId;
  const at = '2026-01-01T00:00:00.000Z';
  let s = applyEndpointEvent(undefined, { v: 1, type: 'endpoint.created', id, tenant: 't' as TenantId, url: 'https://a.example.com', events: ['*'], description: null, secret: 's', events_seq: 40, at }, 1);
  t.is(s.directAfter, 40);
  t.is(s.keyedUntil, undefined);
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.updated', id, ordering: Ordering.Key, at }, 2);
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.updated', id, ordering: Ordering.None, events_seq: 55, at }, 3);
  t.is(s.directAfter, 55, 'back to no ordering: its new consumer starts after 55');
  t.is(s.keyedUntil, 55, 'and the router queues what came before, in key order');
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.disabled', id, reason: DisabledReason.Operator, at }, 4);
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.restored', id, events_seq: 70, at }, 5);
  t.is(s.directAfter, 55, 'a restore after a disable keeps its consumer and its place');
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.deleted', id, at }, 6);
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.restored', id, events_seq: 90, at }, 7);
  t.is(s.directAfter, 90, 'a restore after a delete starts a new consumer');
  t.is(s.keyedUntil, undefined);
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.deleted', id, at }, 8);
  s = applyEndpointEvent(s, { v: 1, type: 'endpoint.restored', id, events_seq: 'x' as unknown as number, at }, 9);
  t.is(s.directAfter, undefined, 'a sequence that is no integer is not one');
  t.false('directAfter' in stateToRow(s) || 'keyedUntil' in stateToRow(s), 'not columns of the projection');
});
