// The delivery role reads pulled messages' headers with its own reader (src/nats/wire-headers.ts): it must
// answer every question as nats.js's decoder does, for what the router writes and for status messages.
import test from 'ava';
import { headers as natsHeaders, Match, MsgHdrsImpl, type MsgHdrs } from '@nats-io/nats-core';
import { WireHeaders } from '../src/nats/wire-headers.ts';
import { DeliveryHeader } from '../streams/deliveries.ts';

const te = new TextEncoder();

function routerHeaders(): Uint8Array {
  const h = natsHeaders();
  h.set(DeliveryHeader.WebhookId, 'msg_2x8Kf0Q');
  h.set(DeliveryHeader.Event, 'user.created');
  h.set(DeliveryHeader.Tenant, 'tenant_ünïcode');
  h.set(DeliveryHeader.Endpoint, 'ep_1');
  h.set(DeliveryHeader.EndpointVersion, '42');
  h.set(DeliveryHeader.EventSeq, '1234');
  h.set('traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
  h.append('X-Twice', 'one');
  h.append('X-Twice', ' two ');
  h.set('Nats-Msg-Id', 'abc:def');
  return (h as MsgHdrsImpl).encode();
}

const blocks: [string, Uint8Array][] = [
  ['what the router writes', routerHeaders()],
  ['a status with a description', te.encode('NATS/1.0 408 Request Timeout\r\nNats-Pending-Messages: 3\r\nNats-Pending-Bytes: 300\r\n\r\n')],
  ['a status alone', te.encode('NATS/1.0 503\r\n\r\n')],
  ['a heartbeat', te.encode('NATS/1.0 100 Idle Heartbeat\r\nNats-Last-Consumer: 0\r\nNats-Last-Stream: 0\r\n\r\n')],
  ['spaces and colons in values, an empty value', te.encode('NATS/1.0\r\nA:  spaced value  \r\nB: x:y:z\r\nC:\r\n\r\n')],
];

for (const [name, raw] of blocks) {
  test(`${name}: read as nats.js reads it`, (t) => {
    const theirs: MsgHdrs = MsgHdrsImpl.decode(raw);
    const ours = new WireHeaders(raw);
    t.is(ours.code, theirs.code);
    t.is(ours.description, theirs.description);
    t.is(ours.status, theirs.status);
    t.is(ours.hasError, theirs.hasError);
    t.deepEqual(ours.keys(), theirs.keys());
    t.deepEqual([...ours], [...theirs]);
    for (const k of [...theirs.keys(), 'absent', 'WEBHOOK-ID', 'Webhook-Id', 'x-twice', 'nats-pending-messages']) {
      for (const match of [Match.Exact, Match.CanonicalMIME, Match.IgnoreCase]) {
        t.is(ours.get(k, match), theirs.get(k, match), `get ${k} ${match}`);
        t.is(ours.has(k, match), theirs.has(k, match), `has ${k} ${match}`);
        t.is(ours.last(k, match), theirs.last(k, match), `last ${k} ${match}`);
        t.deepEqual(ours.values(k, match), theirs.values(k, match), `values ${k} ${match}`);
      }
    }
  });
}

test('set, append and delete change what is read, as for nats.js', (t) => {
  const theirs: MsgHdrs = MsgHdrsImpl.decode(routerHeaders());
  const ours = new WireHeaders(routerHeaders());
  for (const h of [theirs, ours]) {
    h.set(DeliveryHeader.Event, 'user.deleted');
    h.append('X-Twice', 'three');
    h.delete(DeliveryHeader.Tenant);
  }
  t.deepEqual([...ours], [...theirs]);
  t.is(ours.get(DeliveryHeader.Event), 'user.deleted');
  t.false(ours.has(DeliveryHeader.Tenant));
});
