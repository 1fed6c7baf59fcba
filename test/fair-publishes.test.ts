// The fan-out window follows the server's pace (src/router/fair-publishes.ts): acks that come late halve
// it, once per late backlog, never below its floor; quick acks grow it back to its bound. A publisher
// whose acks the test answers, on a clock the test moves.
import test from 'ava';
import { createFairPublishes, MIN_WINDOW, SLOW_ACK_MS } from '../src/router/fair-publishes.ts';
import type { AckedPublisher, StoredAt } from '../src/nats/acked-publisher.ts';
import { headers } from '@nats-io/nats-core';

function acksByHand() {
  const waiting: ((at: StoredAt) => void)[] = [];
  let seq = 0;
  const publisher: AckedPublisher = {
    publish: () => new Promise<StoredAt>((resolve) => waiting.push(resolve)),
    close: () => {},
  };
  /** Answers the `n` oldest publishes, then lets their settling run. */
  const answer = async (n: number) => {
    for (const resolve of waiting.splice(0, n)) resolve({ stream: 'D', seq: ++seq });
    for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
  };
  return { publisher, waiting, answer };
}

test('late acks halve the window once per backlog, in-time acks grow it back', async (t) => {
  let clock = 0;
  const acks = acksByHand();
  const fair = createFairPublishes(acks.publisher, { window: 512, perTenant: 512, now: () => clock });
  for (let i = 0; i < 2000; i++) void fair.publish('tenant_a', 'deliveries.x', 'body', headers());
  t.is(acks.waiting.length, 512, 'the whole window is sent');

  // The server stores slowly: the first 100 acks come after 1.5 s. One halving for the lot.
  clock += SLOW_ACK_MS + 500;
  await acks.answer(100);
  t.is(fair.window(), 256);
  t.is(acks.waiting.length, 412, 'nothing more is sent while past the smaller window');

  // The rest of that backlog, as late: no second halving for it.
  clock += SLOW_ACK_MS + 600;
  await acks.answer(400);
  t.is(fair.window(), 256);
  t.is(acks.waiting.length, 256, 'sent again up to the window');
  // Publishes sent since, late too: halved again, down to the floor at most.
  clock += SLOW_ACK_MS * 3;
  await acks.answer(12);
  t.is(fair.window(), 256, 'the first backlog\'s last acks');
  await acks.answer(1);
  t.is(fair.window(), 128);
  for (let i = 0; i < 4; i++) {
    clock += SLOW_ACK_MS * 3;
    await acks.answer(acks.waiting.length);
  }
  t.is(fair.window(), MIN_WINDOW);
  t.true(acks.waiting.length <= MIN_WINDOW);

  // Neither late nor quick: the window holds.
  clock += SLOW_ACK_MS / 2;
  await acks.answer(acks.waiting.length);
  t.is(fair.window(), MIN_WINDOW);
  t.is(acks.waiting.length, MIN_WINDOW, 'the next window is sent');

  // Quick again: one more publish in flight per ack, up to the bound.
  const before = fair.window();
  await acks.answer(10);
  t.is(fair.window(), before + 10);
  while (acks.waiting.length > 0) await acks.answer(acks.waiting.length);
  t.true(fair.window() > before + 10);
  t.true(fair.window() <= 512);
});
