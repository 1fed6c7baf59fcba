// Postgres going down and coming back loses and doubles nothing. This file runs its OWN Postgres 15
// server (test/helpers/postgres-server.ts) and stops it at will; the machine's Postgres, which other
// test files use in parallel, is never touched. The whole service (every role) runs against it.
//
// While Postgres is down: deliveries flow (the delivery path never reads it), endpoint commands still
// append to the ENDPOINTS stream, deliveries still die, and the API answers 503. Once it is back: the
// projection equals the fold of the stream, and each dead delivery is exactly one dead letter.
import test, { type ExecutionContext } from 'ava';
import { eventually } from './helpers/service.ts';
import { startTestService, type TestService } from './helpers/fixture.ts';
import type { Receiver } from './helpers/receiver.ts';
import { startPostgresServer, type PostgresServer } from './helpers/postgres-server.ts';
import { apiClient } from './helpers/api-client.ts';
import { applyEndpointEvent, isEndpointEvent, type EndpointState } from '../src/domain/endpoint.ts';
import type { TenantId } from '../src/domain/ids.ts';
import { EndpointRecord } from '../src/db/entities.ts';
import { recordToRow, stateToRow, type EndpointRow } from '../src/db/endpoint-rows.ts';
import { createApiKey } from '../src/apikeys/store.ts';
import { ENDPOINTS_STREAM } from '../streams/endpoints.ts';
import { ADVISORIES_STREAM, DEAD_LETTER_CONSUMER } from '../streams/dead-letters.ts';
import { deliveryAddress } from '../streams/deliveries.ts';
import { readCheckpoint } from '../projections/checkpoint.ts';

let pgServer: PostgresServer | undefined;
let h: TestService;
/** Every log line of the service (errors only, unless TEST_LOG_LEVEL says otherwise). */
const logLines: { msg: string }[] = [];

test.before(async () => {
  pgServer = await startPostgresServer();
  h = await startTestService('pg_restart', {
    // The first step is also the ack wait: one of 300 ms let a machine busy enough to stall the event loop
    // that long redeliver an attempt still running ("none arrived twice" failed once on CI, 41 of 40).
    HOOKSTREAM_RETRY_SCHEDULE: '1s,2s',
    HOOKSTREAM_ATTEMPT_TIMEOUT: '2s',
    HOOKSTREAM_RATE_LIMIT: '100000',
  }, {
    databaseUrl: pgServer.url('hookstream'),
    logWrite: (line) => {
      logLines.push(JSON.parse(line) as { msg: string });
      if (process.env['TEST_LOG_LEVEL']) process.stderr.write(line + '\n');
    },
  });
});
test.after.always(async () => {
  // The receivers and the service first, then the private server and its directory, whatever happened in the tests:
  // even when the service does not stop (that fails the file, but leaves no server behind).
  let stopped = true;
  try {
    if (h) {
      const closing = h.closeAll().then(() => true);
      stopped = await Promise.race([closing, new Promise<boolean>((r) => setTimeout(() => r(false), 30_000).unref())]);
      if (!stopped) await h.nats.dispose();
    }
  } finally {
    await pgServer?.dispose();
  }
  if (!stopped) throw new Error('the service did not stop within 30 s after the Postgres restarts');
});

const server = (): PostgresServer => pgServer!;
const logged = (msg: string) => logLines.filter((l) => l.msg === msg).length;
const sql = <T>(query: string, params: unknown[] = []) => h.service.orm!.em.getConnection().execute<T[]>(query, params);

/**
 * Run `during` with the private Postgres stopped (after checking the service's own pool cannot reach
 * it), and start it again afterwards even when `during` fails, so the next test finds it up.
 */
async function whilePostgresIsDown<T>(during: () => Promise<T>): Promise<T> {
  await server().stop('fast');
  try {
    await h.service.orm!.em.fork().execute('select 1').then(
      () => { throw new Error('Postgres still answers after pg_ctl stop'); },
      () => undefined,
    );
    return await during();
  } finally {
    await server().start();
  }
}

/** The ENDPOINTS stream folded from sequence 1 with the domain fold, and its last sequence. */
async function foldEndpointsStream(): Promise<{ lastSeq: number; rows: Map<string, EndpointRow> }> {
  const { state } = await h.service.jsm.streams.info(ENDPOINTS_STREAM);
  const states = new Map<string, EndpointState>();
  if (state.messages > 0) {
    const consumer = await h.service.js.consumers.get(ENDPOINTS_STREAM, { opt_start_seq: 1 });
    const messages = await consumer.consume({ max_messages: 256 });
    try {
      for await (const m of messages) {
        const event: unknown = m.json();
        if (isEndpointEvent(event)) states.set(event.id, applyEndpointEvent(states.get(event.id), event, m.seq));
        if (m.seq >= state.last_seq) break;
      }
    } finally {
      await messages.close();
    }
  }
  return { lastSeq: state.last_seq, rows: new Map([...states].map(([id, s]) => [id, stateToRow(s)])) };
}

async function projectedRows(): Promise<Map<string, EndpointRow>> {
  const records = await h.service.orm!.em.fork().find(EndpointRecord, {}, { disableIdentityMap: true });
  return new Map(records.map((r) => [r.id, recordToRow(r)]));
}

/**
 * No pooled Postgres connection is left checked out once the service is idle: a connection that died
 * with Postgres inside a transaction must go back to the pool (be discarded), not stay out for good.
 */
async function assertNoStrandedConnections(t: ExecutionContext): Promise<void> {
  const pool = await h.service.orm!.em.getConnection().getNativeClient();
  const stranded = () => pool.totalCount - pool.idleCount;
  await eventually(() => (stranded() === 0 ? true : undefined), 10_000, 'no pooled connection checked out').catch(() => undefined);
  t.is(stranded(), 0, `pooled connections still checked out (total ${pool.totalCount}, idle ${pool.idleCount})`);
}

const byId = (rows: Map<string, EndpointRow>) => [...rows.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));

test.serial('deliveries keep flowing while Postgres is down, also to an endpoint created during the outage', async (t) => {
  const tenant = 'tenant_pg_down_delivery' as TenantId;
  const early = await h.receiver();
  await h.store.create(tenant, { url: early.url, events: ['user.*'] });
  const total = 40;
  const late = await whilePostgresIsDown(async () => {
    // Commands append to the ENDPOINTS stream; the directory of the delivery path reads that stream.
    const r = await h.receiver();
    await h.store.create(tenant, { url: r.url, events: ['user.*'] });
    for (let i = 0; i < total; i++) await h.publish(tenant, 'user.updated', { userId: `user_${i}` });
    const delivered = (x: Receiver) => new Set(x.received.map((g) => String(g.headers['webhook-id']))).size;
    await eventually(() => (delivered(early) >= total && delivered(r) >= total ? true : undefined), 30_000, 'every event delivered to both endpoints with Postgres down');
    return r;
  });
  for (const r of [early, late]) {
    if (r.received.length !== total) t.log(r === early ? 'early' : 'late', r.received.map((g) => `${String(g.headers['webhook-id'])} ${g.at}`).join('\n'));
    t.is(new Set(r.received.map((g) => JSON.parse(g.body).data.userId as string)).size, total, 'every event arrived');
    t.is(r.received.length, total, 'none arrived twice');
  }
  await assertNoStrandedConnections(t);
});

test.serial('endpoint commands made while Postgres is down reach the projection once it is back: nothing skipped or doubled', async (t) => {
  const tenant = 'tenant_pg_down_projection' as TenantId;
  const projector = h.service.projector!;
  const existing = await h.store.create(tenant, { url: 'https://example.com/existing', events: ['user.*'] });
  await projector.waitFor(existing.seq);
  const retriesBefore = logged('cannot apply endpoint events; retrying');

  const { created, updated, lastSeq } = await whilePostgresIsDown(async () => {
    const c = await h.store.create(tenant, { url: 'https://example.com/created-while-down', events: ['organization.*'], description: 'new' });
    const u = await h.store.update(tenant, c.endpoint.id, { description: 'changed while Postgres was down' });
    await h.store.update(tenant, existing.endpoint.id, { events: ['user.created', 'user.deleted'] });
    await h.store.rotateSecret(tenant, existing.endpoint.id, 0);
    const gone = await h.store.create(tenant, { url: 'https://example.com/short-lived', events: ['*'] });
    const d = await h.store.delete(tenant, gone.endpoint.id);
    // The projector read them and failed to apply them (and keeps its batch to try again).
    await eventually(() => (logged('cannot apply endpoint events; retrying') > retriesBefore ? true : undefined), 10_000, 'projector failing while Postgres is down');
    t.true(projector.lastSeq() < c.seq, 'nothing applied while Postgres was down');
    return { created: c, updated: u, lastSeq: d.seq };
  });

  await projector.waitFor(lastSeq, 60_000);
  const fold = await foldEndpointsStream();
  t.is(fold.lastSeq, lastSeq, 'no other endpoint event was appended meanwhile');
  t.is(await readCheckpoint(h.service.orm!), fold.lastSeq, 'the checkpoint is the stream\'s last sequence');
  const rows = await projectedRows();
  t.deepEqual(byId(rows), byId(fold.rows), 'the projection equals the fold of the whole stream');
  const row = rows.get(created.endpoint.id);
  t.truthy(row, 'the endpoint created while Postgres was down is projected');
  t.is(row?.version, updated.endpoint.version);
  t.is(row?.version, (await h.store.get(tenant, created.endpoint.id)).version);
  t.is(row?.description, 'changed while Postgres was down');
  t.deepEqual(rows.get(existing.endpoint.id)?.events, ['user.created', 'user.deleted']);
  await assertNoStrandedConnections(t);
});

test.serial('a delivery that dies while Postgres is down becomes exactly one dead letter once it is back', async (t) => {
  const tenant = 'tenant_pg_down_dead' as TenantId;
  const r = await h.receiver(() => 500);
  const { endpoint } = await h.store.create(tenant, { url: r.url, events: ['user.banned'] });
  const failuresBefore = logged('dead-lettering failed; will retry');

  await whilePostgresIsDown(async () => {
    await h.publish(tenant, 'user.banned', { userId: 'user_9', reason: 'spam' });
    // One attempt and the two retries of the schedule, then the advisory.
    await r.waitFor(3);
    // The dead-letter role received the advisory, could not store it, and left it unacked.
    await eventually(() => (logged('dead-lettering failed; will retry') > failuresBefore ? true : undefined), 20_000, 'dead-letter role failing while Postgres is down');
    const info = await h.service.jsm.consumers.info(ADVISORIES_STREAM, DEAD_LETTER_CONSUMER);
    t.true(info.num_ack_pending + info.num_pending >= 1, 'the advisory is kept while Postgres is down');
  });

  const rows = await eventually(async () => {
    const found = await sql<Record<string, unknown>>('select * from dead_letters where endpoint_id = ?', [endpoint.id]);
    return found.length > 0 ? found : undefined;
  }, 60_000, 'dead letter after Postgres is back');
  // Everything settled: the advisory acked, the message gone from its work queue.
  await eventually(async () => {
    const info = await h.service.jsm.consumers.info(ADVISORIES_STREAM, DEAD_LETTER_CONSUMER);
    return info.num_ack_pending === 0 && info.num_pending === 0 ? true : undefined;
  }, 30_000, 'advisory acknowledged');
  const address = deliveryAddress(endpoint.id, h.config.deliveryShards);
  await eventually(async () => {
    const info = await h.service.jsm.streams.info(address.stream, { subjects_filter: address.subject });
    return info.state.subjects?.[address.subject] ? undefined : true;
  }, 10_000, 'message removed from the work queue');

  const again = await sql<Record<string, unknown>>('select * from dead_letters where endpoint_id = ?', [endpoint.id]);
  t.is(again.length, 1, 'exactly one record');
  const row = again[0]!;
  t.is(row['webhook_id'], r.received[0]!.headers['webhook-id']);
  t.is(row['status'], 'dead');
  t.is(row['dead_count'], 1, 'the advisory coming back did not count as another death');
  t.is(row['attempts'], 3);
  t.is(row['last_status'], 500);
  t.is(rows[0]!['id'], row['id']);
  t.is(r.received.length, 3, 'no attempt after the last retry');
  await assertNoStrandedConnections(t);
});

test.serial('the API answers 503 with the error envelope while Postgres is down, and 200 again once it is back', async (t) => {
  const tenant = 'tenant_pg_down_api' as TenantId;
  const { key } = await createApiKey(h.service.orm!.em.fork(), tenant, 'postgres-restart');
  const api = apiClient(h.service.api!.url, key, t);
  const created = await api.post('/v1/webhooks', { url: 'https://hooks.example.com/pg', events: ['user.*'] });
  t.is(created.status, 201, created.text);
  const id = String(created.body.id);
  t.is((await api.get(`/v1/webhooks/${id}`)).status, 200);

  await whilePostgresIsDown(async () => {
    for (const res of [await api.get('/v1/webhooks'), await api.get(`/v1/webhooks/${id}`), await api.post('/v1/webhooks', { url: 'https://hooks.example.com/pg2', events: ['user.*'] })]) {
      t.is(res.status, 503, res.text);
      t.is(res.body?.error?.code, 'unavailable');
      t.true(typeof res.body?.error?.message === 'string' && Array.isArray(res.body?.error?.details), 'error envelope');
      t.truthy(res.headers.get('retry-after'));
    }
    const ready = await fetch(`${h.service.opsUrl}/readyz`);
    t.is(ready.status, 503);
    t.like(((await ready.json()) as { checks: { name: string }[] }).checks.find((c) => c.name === 'postgres'), { ok: false });
  });

  const list = await eventually(async () => {
    const res = await api.get('/v1/webhooks');
    return res.status === 200 ? res : undefined;
  }, 30_000, 'API answering 200 after Postgres is back');
  t.deepEqual(list.body.data.map((e: { id: string }) => e.id), [id], 'the refused POST created nothing');
  t.is((await api.get(`/v1/webhooks/${id}`)).status, 200);
  await eventually(async () => ((await fetch(`${h.service.opsUrl}/readyz`)).status === 200 ? true : undefined), 30_000, 'ready again');
  await assertNoStrandedConnections(t);
});

test.serial('a transaction cut short by a Postgres restart gives its connection back, and the service still stops', async (t) => {
  // What happens to the projector (or a replay) when Postgres goes away in the middle of its transaction.
  const orm = h.service.orm!;
  const cut = orm.em.fork().transactional(async (em) => {
    await em.execute('select 1');
    await whilePostgresIsDown(async () => {});
    await em.execute('select 1');
  });
  await t.throwsAsync(cut, undefined, 'the transaction fails: its connection is gone');
  t.true((await sql<{ one: number }>('select 1 as one'))[0]?.one === 1, 'new queries work');
  await assertNoStrandedConnections(t);
  // Stopping closes the pool, which waits for every checked-out connection: a stranded one would hang it.
  const restarted = await Promise.race([
    h.restart().then(() => true),
    new Promise<boolean>((r) => setTimeout(() => r(false), 30_000).unref()),
  ]);
  t.true(restarted, 'the service stopped and started again');
});
