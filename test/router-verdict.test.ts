// Which routing failures are the event's (rejected) and which are NATS's (retried later), and when.
import test from 'ava';
import type { JsMsg } from '@nats-io/jetstream';
import { PublishRejectedError, type AckedPublisher } from '../src/nats/acked-publisher.ts';
import { createVerdicts, exceptionDetail, isEventsFault, LAST_ROUTING_DELIVERY, retryDelayMs } from '../src/router/verdict.ts';
import { silentLogger } from '../src/log.ts';
import { createServiceMetrics } from '../src/metrics.ts';
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

test('events handed back for NATS\'s reasons are counted as waiting until they come back (readiness shows them)', (t) => {
  const naks: number[] = [];
  const msg = (seq: number, deliveryCount: number) =>
    ({ seq, subject: 'events.tenant_a.user.created', info: { deliveryCount }, nak: (d: number) => void naks.push(d) }) as unknown as JsMsg;
  const verdicts = createVerdicts({ publisher: {} as AckedPublisher, maxEventBytes: 1024, log: silentLogger, metrics: createServiceMetrics() });
  t.deepEqual(verdicts.waiting(), { events: 0, longestMs: 0 });
  verdicts.retry(msg(7, 1), 'fan-out failed: no responders');
  verdicts.retry(msg(8, 1), 'fan-out failed: no responders');
  t.is(verdicts.waiting().events, 2);
  t.deepEqual(naks, [1_000, 1_000]);
  // Back and failing again: still one waiting event.
  verdicts.arrived(7);
  verdicts.retry(msg(7, 2), 'fan-out failed: timeout');
  t.is(verdicts.waiting().events, 2);
  verdicts.arrived(7);
  verdicts.arrived(8);
  t.deepEqual(verdicts.waiting(), { events: 0, longestMs: 0 });
});
