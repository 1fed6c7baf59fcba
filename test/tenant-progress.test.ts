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

test("an earlier event of the key whose fan-out is stored holds neither the next one's publish nor its barrier", async (t) => {
  const p = createTenantProgress();
  const m1 = msg(1, 1);
  p.received(m1, 'a');
  p.keyed('a', 1, 'k');
  const m2 = msg(2, 2);
  p.received(m2, 'a');
  p.keyed('a', 2, 'k');
  t.is(p.settled('a', 2, 'j'), undefined, 'another key waits for nothing');
  t.is(p.barrier('a', 2, 'k'), 1, 'while event 1 is being routed, the barrier is at it');
  const wait = p.settled('a', 2, 'k');
  t.truthy(wait, 'the key\'s next event waits for its earlier one');
  let went = false;
  void wait!.then(() => (went = true));
  await Promise.resolve();
  t.false(went);
  p.stored(1);
  await wait;
  t.is(p.barrier('a', 2, 'k'), 0, 'stored, it no longer counts: only what the router cannot vouch for');
  t.is(p.settled('a', 2, 'k'), undefined);
});

test('an earlier event of the key handed back lets the next one go, and its barrier still holds it', async (t) => {
  const p = createTenantProgress();
  const m1 = msg(1, 1);
  p.received(m1, 'a');
  p.keyed('a', 1, 'k');
  const m2 = msg(2, 2);
  p.received(m2, 'a');
  p.keyed('a', 2, 'k');
  const wait = p.settled('a', 2, 'k');
  m1.nak();
  await wait;
  t.is(p.settled('a', 2, 'k'), undefined, 'nothing to wait for once it is handed back');
  t.is(p.barrier('a', 2, 'k'), 1, 'the barrier stays at the handed-back event');
  // It comes back: routed afresh, waited for again until stored.
  p.received(msg(1, 3, 2), 'a');
  p.keyed('a', 1, 'k');
  t.truthy(p.settled('a', 2, 'k'));
  m1.ack();
  t.is(p.settled('a', 2, 'k'), undefined, 'acked: done');
});

test('a key published faster than its events are stored has at most four waiting; the next goes at once with its barrier', (t) => {
  const p = createTenantProgress();
  for (let seq = 1; seq <= 6; seq++) {
    p.received(msg(seq, seq), 'a');
    p.keyed('a', seq, 'k');
  }
  const waits = [2, 3, 4, 5, 6].map((seq) => p.settled('a', seq, 'k'));
  t.is(waits.filter((w) => w !== undefined).length, 4, 'four wait');
  t.is(waits[4], undefined, 'the fifth does not');
  t.is(p.barrier('a', 6, 'k'), 5, 'and its barrier is at the earlier event of its key');
});
