// The pure pieces of issue 10's receiver control: Retry-After parsing, the next-attempt arithmetic for
// nats-server 2.9.10 (nak(d) waits d + step - backoff[0]), and the AIMD concurrency limit.
import test from 'ava';
import { MAX_RETRY_AFTER_MS, honoursRetryAfter, parseRetryAfter } from '../src/delivery/retry-after.ts';
import { planNextAttempt } from '../src/delivery/next-attempt.ts';
import { createConcurrencyLimit } from '../src/delivery/concurrency.ts';

const now = Date.parse('2026-03-01T12:00:00.000Z');

test('Retry-After in seconds, as an HTTP date, capped at an hour, junk ignored', (t) => {
  t.is(parseRetryAfter('2', now), 2000);
  t.is(parseRetryAfter(' 0 ', now), 0);
  t.is(parseRetryAfter('Sun, 01 Mar 2026 12:00:30 GMT', now), 30_000);
  t.is(parseRetryAfter('Sun, 01 Mar 2026 11:00:00 GMT', now), 0, 'a date in the past means now');
  t.is(parseRetryAfter('86400', now), MAX_RETRY_AFTER_MS);
  t.is(parseRetryAfter('Mon, 02 Mar 2026 12:00:00 GMT', now), MAX_RETRY_AFTER_MS);
  for (const junk of [undefined, '', '1.5', '-3', 'soon', 'Sun, 01 Mar 2026 12:00:30']) t.is(parseRetryAfter(junk, now), undefined, String(junk));
  t.true(honoursRetryAfter(429));
  t.true(honoursRetryAfter(503));
  t.false(honoursRetryAfter(500));
  t.false(honoursRetryAfter(null));
});

test('next attempt: a nak whose delay lands on the schedule step, or on Retry-After when that is later', (t) => {
  const schedule = [300, 600, 2500];
  // Retry-After shorter than the step: the step, from the end of the attempt. nak(d) waits d + 2500 - 300.
  t.deepEqual(planNextAttempt({ now, step: 2500, firstStep: 300, retryAfterMs: 1000 }), { delayMs: 300, at: now + 2500, by: 'schedule' });
  // Longer on the first delivery: nak(d) waits d exactly.
  t.deepEqual(planNextAttempt({ now, step: schedule[0]!, firstStep: 300, retryAfterMs: 2000 }), { delayMs: 2000, at: now + 2000, by: 'retry_after' });
  // On the second: nak(d) waits d + 600 - 300, so d = 2000 - 300.
  const p = planNextAttempt({ now, step: schedule[1]!, firstStep: 300, retryAfterMs: 2000 });
  t.deepEqual(p, { delayMs: 1700, at: now + 2000, by: 'retry_after' });
  t.is(p.delayMs + schedule[1]! - schedule[0]!, 2000);
  // Never an immediate nak: the delay is at least the first step.
  t.true(planNextAttempt({ now, step: 2500, firstStep: 300 }).delayMs >= 300);
});

test('concurrency: halves once per burst of 429s down to 1, grows by one per success up to the maximum', (t) => {
  const c = createConcurrencyLimit(16);
  t.is(c.current, 16);
  c.throttled(0, 100);
  c.throttled(50, 110); // sent before the first decrease: same burst
  t.is(c.current, 8);
  c.throttled(120, 200);
  c.throttled(210, 300);
  c.throttled(310, 400);
  c.throttled(410, 500);
  t.is(c.current, 1);
  for (let i = 0; i < 3; i++) c.succeeded();
  t.is(c.current, 4);
  for (let i = 0; i < 100; i++) c.succeeded();
  t.is(c.current, 16);
});

test('concurrency: failures in a row probe one attempt at a time; the first success opens it again', (t) => {
  const c = createConcurrencyLimit(16);
  c.failed();
  c.failed();
  t.is(c.current, 16, 'two failures do not yet probe');
  c.succeeded();
  c.failed();
  c.failed();
  t.false(c.probing, 'a success between failures starts the count again');
  c.failed();
  t.true(c.probing);
  t.is(c.current, 1);
  c.throttled(0, 10);
  t.is(c.current, 1, 'a 429 while probing stays at one');
  c.succeeded();
  t.false(c.probing);
  t.is(c.current, 8, 'the first 2xx opens the limit to what the 429s left');
});
