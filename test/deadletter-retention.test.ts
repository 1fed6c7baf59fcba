// Dead letters are kept for HOOKSTREAM_DEAD_LETTER_RETENTION after they died or were last replayed, then
// deleted, counted and logged (issue 22). Real Postgres, the service's own schema.
import test from 'ava';
import { startTestService, type TestService } from './helpers/fixture.ts';
import { createLogger } from '../src/log.ts';
import { createServiceMetrics } from '../src/metrics.ts';
import { storeDeadLetter } from '../src/deadletter/store.ts';
import { startDeadLetterRetention } from '../src/deadletter/retention.ts';

let h: TestService;
test.before(async () => { h = await startTestService('dl_retention', { HOOKSTREAM_ROLES: 'api' }); });
test.after.always(() => h?.closeAll());

const DAY = 86_400_000;

test('dead letters past their retention are deleted, counted and logged; younger or recently replayed ones stay', async (t) => {
  const em = () => h.service.orm!.em.fork();
  const store = async (webhookId: string, diedDaysAgo: number) => {
    const row = await storeDeadLetter(em(), {
      endpointId: 'ep_retention', tenant: 'tenant_retention', webhookId, eventType: 'user.created', attempts: 3,
      lastStatus: 500, lastError: null, failedAt: new Date(Date.now() - diedDaysAgo * DAY).toISOString(),
      sealed: new Uint8Array([1]), tag: new Uint8Array([2]), sourceStream: 'DELIVERIES_0', sourceSeq: Math.floor(Math.random() * 1e9),
    });
    return row!.id;
  };
  const old = await store('msg_old', 31);
  const young = await store('msg_young', 29);
  const replayed = await store('msg_replayed', 40);
  await em().execute(`update dead_letters set last_replayed_at = now() - interval '1 day' where id = ?`, [replayed]);
  const lines: { msg: string; count?: number; retention?: string }[] = [];
  const metrics = createServiceMetrics();
  const retention = startDeadLetterRetention({
    orm: h.service.orm!, retentionMs: 30 * DAY, metrics,
    log: createLogger({ level: 'info', write: (l) => lines.push(JSON.parse(l) as { msg: string }) }),
  });
  t.teardown(() => retention.stop());

  t.is(await retention.sweep(), 1);
  const left = (await em().execute<{ id: string }[]>(`select id from dead_letters where endpoint_id = 'ep_retention' order by id`)).map((r) => r.id);
  t.deepEqual(left.sort(), [young, replayed].sort());
  t.false(left.includes(old));
  t.deepEqual(lines.map((l) => [l.msg, l.count, l.retention]), [['dead letters past their retention deleted', 1, '30d']]);
  t.is(metrics.deadLettersExpired.get(), 1);
  t.is(await retention.sweep(), 0, 'nothing more to delete');
  t.is(lines.length, 1, 'a sweep that deletes nothing says nothing');
});
