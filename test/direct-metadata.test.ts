// HOOKSTREAM_DIRECT_DELIVERY's window in EVENTS' metadata (directMetadata, streams/events.ts): on writes
// `since`, off writes `until` ahead once, and on again is refused until the window is drained, then
// writes a new `since` ahead and removes `until`.
import test from 'ava';
import { ConfigError } from '../src/errors.ts';
import { DIRECT_DRAIN_GRACE_MS, DIRECT_UNTIL_LEAD_MS, directMetadata, directWindowOf, inDirectWindow } from '../streams/events.ts';

const NOW = 1_800_000_000_000;
const none = async () => 0;
const window = (m: Record<string, string> | undefined) => directWindowOf({ metadata: m });

test('on for the first time: `since` is now; off before it was ever on: nothing', async (t) => {
  t.deepEqual(window(await directMetadata({ other: 'kept' }, true, NOW, none)), { directSince: NOW, directUntil: undefined });
  t.is((await directMetadata({ other: 'kept' }, true, NOW, none))?.['other'], 'kept');
  t.is(await directMetadata(undefined, false, NOW, none), undefined);
});

test('off while on: `until` written ahead by the lead (rounded up to 10 s), once', async (t) => {
  const on = { hookstream_direct_since: String(NOW - 60_000) };
  const off = await directMetadata(on, false, NOW + 1234, none);
  const until = window(off).directUntil!;
  t.true(until >= NOW + 1234 + DIRECT_UNTIL_LEAD_MS && until < NOW + 1234 + DIRECT_UNTIL_LEAD_MS + 10_000);
  t.is(until % 10_000, 0);
  t.is(window(off).directSince, NOW - 60_000, '`since` kept');
  t.is(await directMetadata(off, false, NOW + 5000, none), undefined, 'written once: a later start with 0 keeps it');
  t.is(await directMetadata(on, true, NOW, none), undefined, 'on and on: nothing');
  t.true(inDirectWindow(window(off), until - 1));
  t.false(inDirectWindow(window(off), until));
  t.false(inDirectWindow(window(off), NOW - 60_001));
});

test('on again: refused before `until` has passed by the grace or while a direct consumer is left, saying when; then a new `since` ahead and no `until`', async (t) => {
  const until = NOW;
  const off = { hookstream_direct_since: String(NOW - 600_000), hookstream_direct_until: String(until) };
  const early = await t.throwsAsync(directMetadata(off, true, until + 1000, none), { instanceOf: ConfigError });
  t.regex(early?.message ?? '', new RegExp(`turned off at ${new Date(until).toISOString()}: it can be turned on again once ${new Date(until + DIRECT_DRAIN_GRACE_MS).toISOString()} has passed and every endpoint's direct consumer has drained and been deleted \\(0 left`));
  const left = await t.throwsAsync(directMetadata(off, true, until + DIRECT_DRAIN_GRACE_MS + 1, async () => 2), { instanceOf: ConfigError });
  t.regex(left?.message ?? '', /once every endpoint's direct consumer has drained and been deleted \(2 left; a disabled endpoint keeps its own/);
  const at = until + DIRECT_DRAIN_GRACE_MS + 1;
  const again = window(await directMetadata(off, true, at, none));
  t.is(again.directUntil, undefined);
  t.true(again.directSince! >= at + DIRECT_UNTIL_LEAD_MS);
});
