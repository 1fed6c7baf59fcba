// Erasure and replays: a dead letter of the erased user replayed (twice, the second forced) while its
// endpoint still fails is, once erased, never POSTed again, and its replays do not die into a new dead
// letter holding the payload; another user's replay goes on as before. Real NATS, Postgres and receiver.
import test from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { AdminClient } from '../src/admin/client.ts';
import type { TenantId } from '../src/domain/ids.ts';

let h: TestService;
let admin: AdminClient;
// Four attempts 3 s apart: a replay spends most of its life (9 s) waiting for a retry at the server, far longer than an erasure takes.
const SCHEDULE_MS = [3000, 3000, 3000];

test.before(async () => {
  h = await startTestService('erasure_replays', { HOOKSTREAM_RETRY_SCHEDULE: SCHEDULE_MS.map((ms) => `${ms}ms`).join(',') });
  ({ admin } = await h.operator({ timeoutMs: 60_000 }));
});
test.after.always(() => h?.closeAll());

const userOf = (body: string) => (JSON.parse(body) as { data: { userId: string } }).data.userId;

test('replays queued or waiting for a retry when their subject is erased are never delivered, and leave no dead letter', async (t) => {
  const tenant = 'tenant_erase_replay';
  const failing = await h.receiver(() => 500);
  const { endpoint } = await h.store.create(tenant as TenantId, { url: failing.url, events: ['*'] });
  await h.publish(tenant, 'user.updated', { userId: 'user_x', note: 'erase me' });
  await h.publish(tenant, 'user.updated', { userId: 'user_y', note: 'keep me' });
  const letters = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint: endpoint.id });
    return page.data.length === 2 ? page.data : undefined;
  }, 60_000, 'both deliveries dead');
  const attempts = SCHEDULE_MS.length + 1;
  t.is(failing.received.length, 2 * attempts);

  // Replayed while the endpoint still fails: the first replay's first attempt fails, then a forced one.
  const x = letters.find((l) => l.webhook_id === failing.received.find((r) => userOf(r.body) === 'user_x')!.headers['webhook-id'])!;
  const y = letters.find((l) => l.id !== x.id)!;
  await admin.replayDeadLetter({ id: x.id });
  await admin.replayDeadLetter({ id: y.id });
  await failing.waitFor(2 * attempts + 2, 30_000);
  await admin.replayDeadLetter({ id: x.id, force: true });

  const r = await admin.eraseSubject({ tenant, user: 'user_x' });
  const erasedAt = Date.now();
  t.like(r.stores, { dead_letters: { erased: 1 } });
  // The forced replay may have made its first attempt (or all but one) by now: at least one of the two is waiting.
  t.true(r.stores.replays.erased >= 1 && r.stores.replays.erased <= 2, `replays erased: ${r.stores.replays.erased}`);

  // Longer than a replay's whole schedule: user_y's replay dies again; nothing of user_x comes after the erasure.
  const ySent = () => failing.received.filter((m) => userOf(m.body) === 'user_y').length;
  await eventually(() => (ySent() === 2 * attempts ? true : undefined), 60_000, "user_y's replay run to its end");
  const dead = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint: endpoint.id });
    return page.data.length === 1 && page.data[0]!.dead_count === 2 ? page.data : undefined;
  }, 30_000, "user_y's dead letter dead again");
  await new Promise((resolve) => setTimeout(resolve, SCHEDULE_MS.reduce((a, b) => a + b, 0) + 1000));
  // An attempt already in flight when its message was erased may still reach the receiver just after: a
  // retry (3 s apart) may not.
  const late = failing.received.filter((m) => userOf(m.body) === 'user_x' && m.at > erasedAt + 1000);
  t.deepEqual(late.map((m) => m.at - erasedAt), [], 'no request carrying user_x after the erasure');
  t.is(dead[0]!.id, y.id);
  const rows = await h.service.orm!.em.fork().execute<{ webhook_id: string }[]>('select webhook_id from dead_letters where tenant = ?', [tenant]);
  t.deepEqual(rows.map((row) => row.webhook_id), [y.webhook_id], 'no dead letter of user_x came back');
  const again = await admin.eraseSubject({ tenant, user: 'user_x' });
  t.like(again.stores, { dead_letters: { erased: 0 }, replays: { erased: 0 }, deliveries: { erased: 0 } });
});

test('a replay made before replays\' locations were kept is found in its endpoint\'s queue and erased', async (t) => {
  const tenant = 'tenant_erase_old_replay';
  const failing = await h.receiver(() => 500);
  const { endpoint } = await h.store.create(tenant as TenantId, { url: failing.url, events: ['*'] });
  await h.publish(tenant, 'user.updated', { userId: 'user_old', note: 'replayed long ago' });
  const [letter] = await eventually(async () => {
    const page = await admin.listDeadLetters({ endpoint: endpoint.id });
    return page.data.length === 1 ? page.data : undefined;
  }, 60_000, 'the dead letter');
  const attempts = SCHEDULE_MS.length + 1;
  await admin.replayDeadLetter({ id: letter!.id });
  await failing.waitFor(attempts + 1, 30_000);
  // As a row replayed before migration 0015: the replay's location is not kept.
  await h.service.orm!.em.fork().execute(`update dead_letters set replayed_to = '[]'::jsonb where id = ?`, [letter!.id]);
  const r = await admin.eraseSubject({ tenant, user: 'user_old' });
  const erasedAt = Date.now();
  t.like(r.stores, { dead_letters: { erased: 1 }, replays: { erased: 1 } });
  await new Promise((resolve) => setTimeout(resolve, SCHEDULE_MS.reduce((a, b) => a + b, 0) + 1000));
  t.deepEqual(failing.received.filter((m) => m.at > erasedAt + 1000).map((m) => m.at - erasedAt), [], 'the replay is never attempted again');
});
