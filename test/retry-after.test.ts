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

test('next attempt: the schedule when it is later, else a nak delay that lands exactly on Retry-After', (t) => {
  const schedule = [300, 600, 2500];
  // Retry-After shorter than the step: left to the backoff.
  t.deepEqual(planNextAttempt({ now, touched: now - 50, step: 2500, firstStep: 300, retryAfterMs: 1000 }),
    { action: 'leave', at: now + 2450, by: 'schedule' });
  // Longer on the first delivery: nak(d) waits d exactly.
  t.deepEqual(planNextAttempt({ now, touched: now - 50, step: schedule[0]!, firstStep: 300, retryAfterMs: 2000 }),
    { action: 'nak', delayMs: 2000, at: now + 2000, by: 'retry_after' });
  // On the second: nak(d) waits d + 600 - 300, so d = 2000 - 300.
  const p = planNextAttempt({ now, touched: now - 50, step: schedule[1]!, firstStep: 300, retryAfterMs: 2000 });
  t.deepEqual(p, { action: 'nak', delayMs: 1700, at: now + 2000, by: 'retry_after' });
  t.is(p.action === 'nak' ? p.delayMs + schedule[1]! - schedule[0]! : 0, 2000);
  // Between what is left of the step and the whole step: working() restarts the step, which covers it.
  t.deepEqual(planNextAttempt({ now, touched: now - 2000, step: 2500, firstStep: 300, retryAfterMs: 1000 }),
    { action: 'working', at: now + 2500, by: 'retry_after' });
  // A rate-limited endpoint's floor: its slot's second.
  t.deepEqual(planNextAttempt({ now, touched: now - 100, step: 300, firstStep: 300, floorMs: 1000 }),
    { action: 'nak', delayMs: 1000, at: now + 1000, by: 'rate_limit' });
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
