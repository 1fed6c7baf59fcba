// Direct delivery's window as a deciding process knows it (src/delivery/direct-window.ts): an event is
// decided only when the last good read covers it (read at R: stored before R + lead - 1 s) or the read
// showed `until` and the event is before it; otherwise the decision waits for a read, never guessed.
import test from 'ava';
import { createDirectWindow, type Window } from '../src/delivery/direct-window.ts';

const LEAD = 30_000;
const SINCE = 1_000_000;

/** A window over a fake clock and a reader the test answers (or fails). */
function fixture(initial?: Window) {
  let clock = SINCE + 10_000;
  let answer: Window | Error = initial ?? { directSince: SINCE, directUntil: undefined };
  let reads = 0;
  const errors: unknown[] = [];
  const w = createDirectWindow({
    read: async () => {
      reads++;
      if (answer instanceof Error) throw answer;
      return answer;
    },
    now: () => clock,
    refreshMs: 3_600_000,
    leadMs: LEAD,
    onError: (e) => errors.push(e),
  });
  return {
    w, errors,
    reads: () => reads,
    tick: (ms: number) => { clock += ms; },
    at: () => clock,
    answer: (a: Window | Error) => { answer = a; },
  };
}

test('before any read nothing is decided', (t) => {
  const f = fixture();
  // The start-up read is under way; no answer yet, so no decision.
  t.teardown(() => f.w.stop());
  t.is(f.w.current(), undefined);
});

test('fresh: an event before the read + lead - 1 s is decided; one later waits', async (t) => {
  const f = fixture();
  t.teardown(() => f.w.stop());
  await f.w.refresh();
  const read = f.at();
  t.is(f.w.direct(read), true, 'direct since `since`, no `until`');
  t.is(f.w.direct(SINCE - 1), false, 'before `since`: the routers\'');
  t.is(f.w.beforeUntil(read + LEAD - 1001), true);
  t.is(f.w.direct(read + LEAD - 1000), undefined, 'past what the read covers: held');
  t.is(f.w.beforeUntil(read + LEAD), undefined);
});

test('stale: a decision waits for the next good read, through failed ones, and is then made', async (t) => {
  const f = fixture();
  t.teardown(() => f.w.stop());
  await f.w.refresh();
  f.tick(60_000);
  const event = f.at();
  t.is(f.w.direct(event), undefined, 'the last read is a minute old');
  f.answer(new Error('no responders'));
  let settled = false;
  const waiting = f.w.known(event).then(() => { settled = true; });
  await f.w.refresh();
  await Promise.resolve();
  t.false(settled, 'a failed read decides nothing');
  t.true(f.errors.length >= 1);
  t.is(f.w.direct(event), undefined);
  f.answer({ directSince: SINCE, directUntil: undefined });
  f.tick(1000);
  await f.w.refresh();
  await waiting;
  t.true(settled);
  t.is(f.w.direct(event), true);
});

test('until known: decided for every event before it however old the read; from it on, only while fresh', async (t) => {
  const until = SINCE + 50_000;
  const f = fixture({ directSince: SINCE, directUntil: until });
  t.teardown(() => f.w.stop());
  await f.w.refresh();
  f.tick(10 * 60_000);
  t.is(f.w.direct(until - 1), true, 'before `until`: the direct consumers\', read long ago or not');
  t.is(f.w.beforeUntil(until - 1), true);
  t.is(f.w.direct(until), undefined, 'at `until` with a stale read: held (a later turn on may have moved `since`)');
  await f.w.refresh();
  t.is(f.w.direct(until), false, 'fresh: the routers\'');
  t.is(f.w.beforeUntil(until), false);
  t.is(f.w.direct(SINCE - 1), false);
});

test('until written after a read: events the read covered are still before it (written lead ahead)', async (t) => {
  const f = fixture();
  t.teardown(() => f.w.stop());
  await f.w.refresh();
  const read = f.at();
  // Another process writes `until` a moment later, lead ahead of its own clock.
  f.tick(200);
  f.answer({ directSince: SINCE, directUntil: f.at() + LEAD });
  for (const at of [read, read + LEAD - 1001]) t.is(f.w.beforeUntil(at), true);
  const until = f.at() + LEAD;
  f.tick(2000);
  await f.w.refresh();
  t.is(f.w.beforeUntil(read + LEAD - 1001), true);
  t.is(f.w.beforeUntil(until - 1), true);
  t.is(f.w.beforeUntil(until), false);
});

test('never on: nothing is direct, and still only while the read is fresh', async (t) => {
  const f = fixture({ directSince: undefined, directUntil: undefined });
  t.teardown(() => f.w.stop());
  await f.w.refresh();
  t.is(f.w.direct(f.at()), false);
  t.is(f.w.direct(f.at() + LEAD), undefined);
});
