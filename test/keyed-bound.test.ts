// The router's bound of an ordered endpoint (src/router/keyed-bound.ts): its keyed backlog as last read
// plus what it routed since. The reading's answer is held here to place deliveries exactly around it, an
// order a real server gives only now and then (test/queue-bound.test.ts refused one of the first five in
// about a third of its runs under load, before the fix).
import test from 'ava';
import type { JetStreamManager } from '@nats-io/jetstream';
import { createKeyedQueueBound } from '../src/router/keyed-bound.ts';
import { createLogger } from '../src/log.ts';

/** A consumer info request whose answer the test gives. */
function heldReadings() {
  const answers: ((backlog: number) => void)[] = [];
  const jsm = {
    consumers: {
      info: () => new Promise((resolve) => answers.push((backlog) => resolve({ num_pending: backlog, num_ack_pending: 0 }))),
    },
  } as unknown as JetStreamManager;
  return { jsm, answer: (backlog: number) => answers.shift()!(backlog), asked: () => answers.length };
}

const settle = () => new Promise((r) => setImmediate(r));

test('deliveries stored while a reading is under way are not counted twice: the bound refuses none with room left', async (t) => {
  const { jsm, answer, asked } = heldReadings();
  const bound = createKeyedQueueBound({ jsm, shards: 4, maxQueued: 5, log: createLogger({ level: 'error' }) });
  // The first delivery starts a reading; three more are routed, and all four stored, before its answer.
  for (let i = 0; i < 4; i++) t.false(bound.full('webhook_a'), `delivery ${i + 1}`);
  for (let i = 0; i < 4; i++) bound.answered('webhook_a', true);
  t.is(asked(), 1);
  answer(4);
  await settle();
  t.is(asked(), 1, 'stored while it was asked, so maybe not in its answer: a second reading follows');
  answer(4);
  await settle();
  t.is(asked(), 0, 'and no third');
  t.false(bound.full('webhook_a'), 'the fifth: four are queued');
  t.true(bound.full('webhook_a'), 'the sixth: five are, one of them on its way');
});

test('a delivery still on its way when the answer comes is counted once; one whose publish failed frees its place', async (t) => {
  const { jsm, answer } = heldReadings();
  const bound = createKeyedQueueBound({ jsm, shards: 4, maxQueued: 2, log: createLogger({ level: 'error' }) });
  t.false(bound.full('webhook_b'));
  t.false(bound.full('webhook_b'));
  bound.answered('webhook_b', true);
  // The answer counts the stored one; the other is still on its way: with it the bound is reached.
  answer(1);
  await settle();
  t.true(bound.full('webhook_b'));
  // Its publish failed: nothing was stored for it, and its place is free again.
  bound.answered('webhook_b', false);
  t.false(bound.full('webhook_b'));
  t.true(bound.full('webhook_b'));
});
