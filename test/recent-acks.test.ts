// The deliveries acked after a 2xx are known by stream, sequence, webhook id and endpoint: a redelivery of
// one is recognised (acked again, not POSTed twice), but a new message at a sequence a reset stream handed
// out again is not mistaken for it.
import test from 'ava';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { createRecentAcks } from '../src/delivery/recent-acks.ts';
import type { PulledMsg } from '../src/nats/pulled-msg.ts';
import { DeliveryHeader } from '../streams/deliveries.ts';

const delivery = (stream: string, seq: number, webhookId: string, endpoint = 'ep_1', deliveryCount = 1): PulledMsg => {
  const h = natsHeaders();
  h.set(DeliveryHeader.WebhookId, webhookId);
  h.set(DeliveryHeader.Endpoint, endpoint);
  const none = () => {};
  return {
    subject: 'd', data: new Uint8Array(), headers: h, reply: '', seq,
    info: { stream, consumer: endpoint, deliveryCount, streamSequence: seq }, ack: none, nak: none, working: none, term: none,
  };
};

test('a redelivery of an acked delivery is known; the same sequence carrying another delivery is not', (t) => {
  const acks = createRecentAcks();
  acks.add(delivery('DELIVERIES_0', 7, 'msg_a'));
  t.true(acks.has(delivery('DELIVERIES_0', 7, 'msg_a', 'ep_1', 2)), 'its redelivery');
  t.false(acks.has(delivery('DELIVERIES_0', 7, 'msg_b', 'ep_1', 2)), 'another event at a reused sequence');
  t.false(acks.has(delivery('DELIVERIES_0', 7, 'msg_a', 'ep_2', 2)), 'the same event for another endpoint at a reused sequence');
  t.false(acks.has(delivery('DELIVERIES_1', 7, 'msg_a', 'ep_1', 2)), 'another stream');
  t.true(acks.acked('DELIVERIES_0', 7), 'by place, for the ordering gate');
});

test('a copy of an event in a partition stream, acked for one endpoint, is not taken as acked for another', (t) => {
  // Every endpoint of the partition's tenants reads the same message, with no delivery headers.
  const copy = (endpoint: string, deliveryCount = 1): PulledMsg => ({ ...delivery('EVENTS_3', 42, '', endpoint, deliveryCount), headers: undefined });
  const acks = createRecentAcks();
  acks.add(copy('ep_a'));
  t.true(acks.has(copy('ep_a', 2)));
  t.false(acks.has(copy('ep_b', 2)), 'the other endpoint\'s redelivery is attempted');
  // Each endpoint's ack is kept beside the others' (a partition's event has as many readers as endpoints).
  acks.add(copy('ep_b'));
  acks.add(copy('ep_c'));
  t.true(acks.has(copy('ep_a')), 'handed out again as new after a restarted nats-server lost the ack');
  t.true(acks.has(copy('ep_b')));
});

test('a sequence is forgotten once one 8,192 higher is acked on its stream', (t) => {
  const acks = createRecentAcks();
  acks.add(delivery('DELIVERIES_0', 1, 'msg_a'));
  acks.add(delivery('DELIVERIES_0', 1 + 8192, 'msg_b'));
  t.false(acks.has(delivery('DELIVERIES_0', 1, 'msg_a', 'ep_1', 2)));
  t.true(acks.has(delivery('DELIVERIES_0', 1 + 8192, 'msg_b', 'ep_1', 2)));
});
