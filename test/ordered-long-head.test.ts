// Issue 21 at its real length: a key whose head fails for a minute (past several retry steps) holds back
// only that key. Another key and unkeyed events published all through the minute arrive meanwhile; the
// failing key's later events wait, unattempted, and go in order once the head succeeds.
import test from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Received } from './helpers/receiver.ts';
import type { TenantId } from '../src/domain/ids.ts';

const FAILS_FOR_MS = 60_000;

let h: TestService;

test.before(async () => {
  // Retries after 5, 15, 35 and 65 s: the head fails through four of its attempts, and is not dead by then.
  h = await startTestService('ordered_minute', { HOOKSTREAM_RETRY_SCHEDULE: '5s,10s,20s,30s,30s' });
});

test.after.always(() => h?.closeAll());

interface Body { type: string; data: { userId?: string; n?: number } }
const bodyOf = (r: Received) => JSON.parse(r.body) as Body;

test('a head failing for a minute holds back only its own key', async (t) => {
  const tenant = 'tenant_long_head';
  const failUntil = Date.now() + FAILS_FOR_MS;
  const r = await h.receiver((req) => {
    const { data } = bodyOf(req);
    return data.userId === 'user_stuck' && data.n === 0 && Date.now() < failUntil ? 503 : 204;
  });
  await h.store.create(tenant as TenantId, { url: r.url, events: ['*'], ordering: 'key' });
  for (let n = 0; n < 3; n++) await h.publish(tenant, 'user.updated', { userId: 'user_stuck', n });
  const of = (userId: string) => r.received.filter((x) => bodyOf(x).data.userId === userId);

  // Every 10 s of the minute: another key's event and an unkeyed one, each delivered while the head fails.
  let round = 0;
  while (Date.now() < failUntil - 10_000) {
    await h.publish(tenant, 'user.updated', { userId: 'user_free', n: round });
    await h.publish(tenant, 'connection.saml_certificate_renewed', { n: round });
    const want = round + 1;
    await eventually(() => (of('user_free').length >= want && r.received.filter((x) => bodyOf(x).type === 'connection.saml_certificate_renewed').length >= want ? true : undefined),
      10_000, `round ${round}: the other key and the unkeyed event, while the head fails`);
    t.deepEqual([...new Set(of('user_stuck').map((x) => bodyOf(x).data.n))], [0], `round ${round}: nothing after the failing head attempted`);
    round++;
    await new Promise((res) => setTimeout(res, 10_000));
  }
  t.true(round >= 4, 'rounds through the minute');
  t.true(of('user_stuck').length >= 3, `the head was retried (${of('user_stuck').length} attempts)`);
  t.deepEqual(of('user_free').map((x) => bodyOf(x).data.n), [...Array(round).keys()], 'the other key in order');

  // The head's attempt after the minute succeeds: then the rest of its key, in order, each once.
  await eventually(() => (of('user_stuck').filter((x) => bodyOf(x).data.n! > 0).length === 2 ? true : undefined), 45_000, 'the key after its head');
  const stuck = of('user_stuck').map((x) => bodyOf(x).data.n);
  t.deepEqual(stuck.slice(stuck.lastIndexOf(0)), [0, 1, 2]);
});
