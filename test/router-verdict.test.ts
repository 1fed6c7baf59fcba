// Which routing failures are the event's (rejected) and which are NATS's (retried later), and when.
import test from 'ava';
import { PublishRejectedError } from '../src/nats/acked-publisher.ts';
import { exceptionDetail, isEventsFault, LAST_ROUTING_DELIVERY, retryDelayMs } from '../src/router/verdict.ts';
import { ROUTER_MAX_DELIVER } from '../streams/events.ts';

test('only a stream refusing the message for its size is the event\'s fault', (t) => {
  t.true(isEventsFault(new PublishRejectedError('message size exceeds maximum allowed (10054)', 10054)));
  for (const e of [
    new PublishRejectedError('no responders: no stream listens on the subject', 503),
    new PublishRejectedError('no publish acknowledgement within 5000ms'),
    new PublishRejectedError('connection closed'),
    new PublishRejectedError('publisher closed'),
    new PublishRejectedError('maximum messages exceeded (10077)', 10077),
    new Error('TIMEOUT'),
    'a string',
  ]) t.false(isEventsFault(e), String(e));
});

test('retries wait longer each time, and the router gives up routing with deliveries to spare', (t) => {
  const delays = Array.from({ length: LAST_ROUTING_DELIVERY }, (_, i) => retryDelayMs(i + 1));
  t.deepEqual(delays, [1_000, 5_000, 15_000, 60_000, 300_000, 900_000, 1_800_000]);
  t.true(delays.reduce((a, b) => a + b) > 45 * 60_000, 'most of an hour of retries');
  t.is(retryDelayMs(0), 1_000);
  t.is(retryDelayMs(99), 1_800_000);
  t.is(ROUTER_MAX_DELIVER, 10);
  t.is(ROUTER_MAX_DELIVER - LAST_ROUTING_DELIVERY, 3, 'one delivery to reject, two spare to store it');
});

test('an exception is described by its class and message', (t) => {
  t.is(exceptionDetail(new TypeError('x is not a function')), 'TypeError: x is not a function');
  t.is(exceptionDetail(new RangeError('Maximum call stack size exceeded')), 'RangeError: Maximum call stack size exceeded');
  t.is(exceptionDetail('thrown text'), 'thrown text');
});
