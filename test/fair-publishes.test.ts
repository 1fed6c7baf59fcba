// The fan-out window aims at a short wait for acks (src/router/fair-publishes.ts): it starts small, grows by
// one per quick ack while it is full, is halved by an ack later than its target, once per round trip, never
// below its floor; and another tenant's publish is sent at the next free place, not behind the queue. A
// publisher whose acks the test answers, on a clock the test moves.
import test from 'ava';
import { createFairPublishes, FIRST_WINDOW, MIN_WINDOW, TARGET_ACK_MS } from '../src/router/fair-publishes.ts';
import type { AckedPublisher, StoredAt } from '../src/nats/acked-publisher.ts';
import { headers } from '@nats-io/nats-core';

function acksByHand() {
  const waiting: { subject: string; resolve: (at: StoredAt) => void }[] = [];
  let seq = 0;
  const publisher: AckedPublisher = {
    publish: (subject) => new Promise<StoredAt>((resolve) => waiting.push({ subject, resolve })),
    close: () => {},
    drain: async () => {},
  };
  /** Answers the `n` oldest publishes, then lets their settling run. */
  const answer = async (n: number) => {
    for (const w of waiting.splice(0, n)) w.resolve({ stream: 'D', seq: ++seq });
    for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
  };
  return { publisher, waiting, answer };
}

test('quick acks grow the window while it is full, late ones halve it once per round trip, down to its floor', async (t) => {
  let clock = 0;
  const acks = acksByHand();
  const fair = createFairPublishes(acks.publisher, { window: 512, perTenant: 512, now: () => clock });
  for (let i = 0; i < 5000; i++) void fair.publish('tenant_a', 'deliveries.x', 'body', headers());
  t.is(acks.waiting.length, FIRST_WINDOW, 'a first window is sent, not the whole queue');

  // Quick acks: one more in flight for each, up to the bound.
  clock += 1;
  await acks.answer(10);
  t.is(fair.window(), FIRST_WINDOW + 10);
  t.is(acks.waiting.length, FIRST_WINDOW + 10);
  while (fair.window() < 512) await acks.answer(acks.waiting.length);
  t.is(fair.window(), 512, 'never past its bound');
  t.is(acks.waiting.length, 512);

  // The server stores slowly: acks after more than the target. One halving for what was in flight then.
  clock += TARGET_ACK_MS + 50;
  await acks.answer(100);
  t.is(fair.window(), 256);
  t.is(acks.waiting.length, 412, 'nothing more is sent while past the smaller window');
  clock += TARGET_ACK_MS + 50;
  await acks.answer(400);
  t.is(fair.window(), 256, 'the rest of that round trip halves nothing more');
  t.is(acks.waiting.length, 256, 'sent again up to the window');
  // Publishes sent since, late too: halved again, down to the floor at most.
  clock += TARGET_ACK_MS * 3;
  await acks.answer(12);
  t.is(fair.window(), 256, 'the first round trip\'s last acks');
  await acks.answer(1);
  t.is(fair.window(), 128);
  for (let i = 0; i < 6; i++) {
    clock += TARGET_ACK_MS * 3;
    await acks.answer(acks.waiting.length);
  }
  t.is(fair.window(), MIN_WINDOW);
  t.true(acks.waiting.length <= MIN_WINDOW);

  // Neither late nor quick: the window holds.
  clock += TARGET_ACK_MS * 0.75;
  await acks.answer(acks.waiting.length);
  t.is(fair.window(), MIN_WINDOW);
  t.is(acks.waiting.length, MIN_WINDOW, 'the next window is sent');
});

test('a window that is not full does not grow', async (t) => {
  const acks = acksByHand();
  const fair = createFairPublishes(acks.publisher, { window: 512, perTenant: 512, now: () => 0 });
  for (let round = 0; round < 50; round++) {
    for (let i = 0; i < 10; i++) void fair.publish('tenant_a', 'deliveries.x', 'body', headers());
    await acks.answer(acks.waiting.length);
  }
  t.is(fair.window(), FIRST_WINDOW, 'quick acks of a window never full say nothing of the server');
});

test("another tenant's publish goes at the next free place, ahead of the queued fan-out", async (t) => {
  const acks = acksByHand();
  const fair = createFairPublishes(acks.publisher, { window: 512, perTenant: 512, now: () => 0 });
  for (let i = 0; i < 10_000; i++) void fair.publish('tenant_big', 'deliveries.big', 'body', headers());
  let stored = false;
  void fair.publish('tenant_small', 'deliveries.small', 'body', headers()).then(() => { stored = true; });
  t.is(acks.waiting.length, FIRST_WINDOW);
  await acks.answer(1);
  t.is(acks.waiting.at(-1)!.subject, 'deliveries.small', 'sent with the first place freed');
  const ahead = acks.waiting.length - 1;
  await acks.answer(acks.waiting.length);
  t.true(stored);
  t.log(`the other tenant's publish waited behind ${ahead} of the big tenant's 10,000 (its window's)`);
  t.true(ahead <= FIRST_WINDOW);
});
