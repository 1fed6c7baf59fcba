// The barrier the router stamps on a keyed delivery (src/router/tenant-progress.ts): the events it must
// wait for are those of its own tenant and key still unfinished, and any event the router cannot vouch for
// (before its first delivery, or since a break in its consumer's delivery sequence) is the shared floor's.
import test from 'ava';
import type { JsMsg } from '@nats-io/jetstream';
import { createTenantProgress } from '../src/router/tenant-progress.ts';

/** A message of the router's consumer as far as the progress looks at it; `settled` records ack/term/nak. */
function msg(seq: number, delivery: number, deliveryCount = 1): JsMsg & { settled: string[] } {
  const settled: string[] = [];
  return {
    seq, settled,
    info: { deliverySequence: delivery, deliveryCount },
    ack() { settled.push('ack'); },
    term() { settled.push('term'); },
    nak() { settled.push('nak'); },
  } as unknown as JsMsg & { settled: string[] };
}

test("a keyed delivery waits only for its own tenant's unfinished events of its key", (t) => {
  const p = createTenantProgress();
  const m5 = msg(5, 1);
  p.received(m5, 'a');
  p.keyed('a', 5, 'k1');
  t.is(p.barrier('a', 5, 'k1'), 4, 'nothing known before the first delivery: the event before it');
  const m6 = msg(6, 2);
  p.received(m6, 'b');
  p.keyed('b', 6, 'k2');
  const m7 = msg(7, 3);
  p.received(m7, 'a');
  p.keyed('a', 7, 'k3');
  t.is(p.barrier('b', 6, 'k2'), 4, "tenant a's unfinished event 5 does not hold tenant b");
  t.is(p.barrier('a', 7, 'k3'), 4, "another key's unfinished event does not hold it");
  const m8 = msg(8, 4);
  p.received(m8, 'a');
  t.is(p.barrier('a', 9, 'k3'), 8, 'an event whose key is not read yet holds every key');
  p.keyed('a', 8, null);
  t.is(p.barrier('a', 9, 'k1'), 5, 'an unfinished event of the key holds it');
  m5.nak();
  t.is(p.barrier('a', 9, 'k1'), 5, 'handed back, it stays unfinished');
  m5.ack();
  t.deepEqual(m5.settled, ['nak', 'ack'], 'the message is still acked');
  t.is(p.barrier('a', 9, 'k1'), 4, 'once acked, it holds nothing');
  m7.term();
  t.is(p.barrier('a', 9, 'k3'), 4, 'once terminated, it holds nothing');
});

test('after a break in the delivery sequence, only the next first delivery starts what the router vouches for', (t) => {
  const p = createTenantProgress();
  p.received(msg(10, 1), 'a');
  p.keyed('a', 10, 'k');
  t.is(p.barrier('a', 11, 'k'), 10);
  // Delivery 2 went to another router: event 11 may be there.
  p.received(msg(3, 3, 2), 'a');
  t.is(p.barrier('a', 12, 'k'), 11, 'a redelivery after a break vouches for nothing');
  p.received(msg(12, 4), 'b');
  p.keyed('b', 12, 'k');
  t.is(p.barrier('b', 13, 'k'), 12);
  t.is(p.barrier('a', 14, 'j'), 11, 'from the next first delivery on: every event after 11 was delivered here');
});
