// The Postgres projection of the ENDPOINTS stream against a real nats-server and a real Postgres:
// rows equal the fold, restarts and concurrent projectors apply every event exactly once, a rebuild
// equals the live projection, and malformed messages are skipped.
import test from 'ava';
import { jetstream, jetstreamManager, type JetStreamClient } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import { startNatsServer, type NatsServer } from './helpers/nats-server.ts';
import { createTestDatabase, type TestDatabase } from './helpers/database.ts';
import { connectNats } from '../src/nats/connect.ts';
import { openDatabase, closeDatabase, type Database } from '../src/db/orm.ts';
import { EndpointRecord } from '../src/db/entities.ts';
import { recordToRow, type EndpointRow } from '../src/db/endpoint-rows.ts';
import { ENDPOINTS_STREAM, ensureEndpointsStream, endpointSubject } from '../streams/endpoints.ts';
import { applyEndpointEvent, type EndpointEvent, type EndpointState } from '../src/domain/endpoint.ts';
import { newIdBody, type EndpointId, type TenantId } from '../src/domain/ids.ts';
import type { EventPattern } from '../src/domain/catalogue.ts';
import { createLogger, silentLogger, type Logger } from '../src/log.ts';
import { rebuildEndpointProjection, startEndpointProjector, writeEndpointState, type EndpointProjector } from '../projections/endpoints.ts';
import { readCheckpoint, readSkipped } from '../projections/checkpoint.ts';
import { startProjector, type ReadModel } from '../projections/engine.ts';
import { createServiceMetrics } from '../src/metrics.ts';
import { ProjectionLagError } from '../projections/wait.ts';

interface Env {
  server: NatsServer;
  js: JetStreamClient;
  orm: Database;
  log: Logger;
  /** Every message published, in stream order, for computing the expected fold. */
  published: { seq: number; event: EndpointEvent | undefined }[];
  publish(event: EndpointEvent): Promise<number>;
  publishRaw(subject: string, body: string): Promise<number>;
}

// Generous: these tests check outcomes, never speed, and ava runs test files side by side.
const WAIT = 60_000;

const cleanups: (() => Promise<unknown>)[] = [];
test.after.always(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => {});
});

async function setup(label: string, log: Logger = silentLogger): Promise<Env> {
  const server: NatsServer = await startNatsServer();
  cleanups.push(() => server.dispose());
  const db: TestDatabase = await createTestDatabase(`projection_${label}`);
  cleanups.push(() => db.drop());
  const nc: NatsConnection = await connectNats({ url: server.url });
  cleanups.push(() => nc.close());
  const orm = await openDatabase(db.url, log);
  cleanups.push(() => closeDatabase(orm));
  await ensureEndpointsStream(await jetstreamManager(nc));
  const js = jetstream(nc);
  const published: Env['published'] = [];
  const publishRaw = async (subject: string, body: string) => (await js.publish(subject, body)).seq;
  return {
    server, js, orm, log, published, publishRaw,
    async publish(event) {
      const seq = await publishRaw(endpointSubject(event.id), JSON.stringify(event));
      published.push({ seq, event });
      return seq;
    },
  };
}

// ---- events ----

let clock = Date.UTC(2026, 0, 1);
const at = () => new Date((clock += 1000)).toISOString();
const newId = () => `webhook_${newIdBody()}` as EndpointId;
const tenant = (t: string) => t as TenantId;

const created = (id: EndpointId, t: string, events: EventPattern[] = ['user.*']): EndpointEvent =>
  ({ v: 1, type: 'endpoint.created', id, tenant: tenant(t), url: `https://example.com/${id}`, events, description: null, secret: 'sealed-secret', at: at() });
const updated = (id: EndpointId, fields: { url?: string; events?: EventPattern[]; description?: string | null }): EndpointEvent =>
  ({ v: 1, type: 'endpoint.updated', id, ...fields, at: at() });
const deleted = (id: EndpointId): EndpointEvent => ({ v: 1, type: 'endpoint.deleted', id, at: at() });
const restored = (id: EndpointId): EndpointEvent => ({ v: 1, type: 'endpoint.restored', id, at: at() });
const rotated = (id: EndpointId): EndpointEvent =>
  ({ v: 1, type: 'endpoint.secret_rotated', id, secret: 'sealed-new', previous_expires_at: at(), at: at() });

/** A workload where every event leaves a mark: each update changes a different field to a new value. */
function workload(ids: EndpointId[], rounds: number): EndpointEvent[] {
  const out: EndpointEvent[] = ids.map((id, i) => created(id, i % 2 ? 'tenant_b' : 'tenant_a'));
  const patterns: EventPattern[] = ['user.created', 'organization.*', 'organizationMembership.*', '*'];
  for (let r = 0; r < rounds; r++) {
    for (const [i, id] of ids.entries()) {
      switch ((r + i) % 6) {
        case 0: out.push(updated(id, { url: `https://example.com/${id}/${r}` })); break;
        case 1: out.push(updated(id, { description: `round ${r}` })); break;
        case 2: out.push(updated(id, { events: [patterns[r % patterns.length]!] })); break;
        case 3: out.push(deleted(id)); break;
        case 4: out.push(restored(id)); break;
        case 5: out.push(rotated(id)); break;
      }
    }
  }
  return out;
}

/** What the projection must hold: the domain fold over everything published, minus the secrets. */
function expectedRows(published: Env['published']): EndpointRow[] {
  const states = new Map<string, EndpointState>();
  for (const { seq, event } of published) {
    if (!event) continue;
    try {
      states.set(event.id, applyEndpointEvent(states.get(event.id), event, seq));
    } catch { /* the projector skips what cannot apply, too */ }
  }
  return [...states.values()]
    .map(({ id, tenant, url, events, description, status, signatureScheme, signingPublicKey, rateLimit, ordering, disabledReason, disabledAt, createdAt, updatedAt, version }) =>
      ({ id, tenant, url, events, description, status, signatureScheme, signingPublicKey, rateLimit, ordering, disabledReason, disabledAt, createdAt, updatedAt, version }))
    .sort((a, b) => (a.id < b.id ? -1 : 1));
}

async function projectedRows(orm: Database): Promise<EndpointRow[]> {
  const records = await orm.em.fork().find(EndpointRecord, {}, { orderBy: { id: 'asc' } });
  return records.map(recordToRow);
}

async function publishAll(env: Env, events: EndpointEvent[]): Promise<number> {
  let last = 0;
  for (const e of events) last = await env.publish(e);
  return last;
}

/**
 * Record every write to the projection: the (id, version) of each row write and each checkpoint value.
 * With batch size 1 each applied event is one row write, so exactly-once becomes countable.
 */
async function installAudit(orm: Database): Promise<void> {
  const em = orm.em.fork();
  await em.execute('create table audit_rows (n bigserial primary key, id text not null, version bigint not null)');
  await em.execute('create table audit_checkpoints (n bigserial primary key, last_seq bigint not null)');
  await em.execute(`create function audit_row() returns trigger language plpgsql as $$
    begin insert into audit_rows (id, version) values (new.id, new.version); return new; end $$`);
  await em.execute(`create function audit_checkpoint() returns trigger language plpgsql as $$
    begin insert into audit_checkpoints (last_seq) values (new.last_seq); return new; end $$`);
  await em.execute('create trigger audit_rows after insert or update on endpoints for each row execute function audit_row()');
  await em.execute('create trigger audit_checkpoints after update on projection_checkpoints for each row execute function audit_checkpoint()');
}

async function auditedRowWrites(orm: Database): Promise<string[]> {
  const rows = await orm.em.fork().execute<{ id: string; version: string | number }[]>('select id, version from audit_rows order by n');
  return rows.map((r) => `${r.id}@${Number(r.version)}`);
}

async function auditedCheckpoints(orm: Database): Promise<number[]> {
  const rows = await orm.em.fork().execute<{ last_seq: string | number }[]>('select last_seq from audit_checkpoints order by n');
  return rows.map((r) => Number(r.last_seq));
}

const isIncreasing = (xs: number[]) => xs.every((x, i) => i === 0 || x > xs[i - 1]!);

test('rows equal the fold of the stream, live and from a backlog', async (t) => {
  const env = await setup('fold');
  const [a, b, c] = [newId(), newId(), newId()];
  // A backlog before the projector starts...
  await publishAll(env, [
    created(a, 'tenant_a', ['user.*', 'organization.created']), created(b, 'tenant_b'),
    updated(a, { description: 'first', url: 'https://example.com/a2' }), deleted(b), rotated(a),
  ]);
  const projector = await startEndpointProjector(env);
  t.teardown(() => projector.stop());
  // ...and events that arrive while it runs.
  const last = await publishAll(env, [
    created(c, 'tenant_a'), restored(b), updated(a, { description: null }), updated(c, { events: ['*'] }), deleted(c),
  ]);
  await projector.waitFor(last, WAIT);
  t.is(projector.lastSeq(), last);
  const rows = await projectedRows(env.orm);
  t.deepEqual(rows, expectedRows(env.published));
  const rowA = rows.find((r) => r.id === a)!;
  t.is(rowA.description, null);
  t.deepEqual(rowA.events, ['user.*', 'organization.created']);
  t.is(rows.find((r) => r.id === b)!.status, 'active');
  t.is(rows.find((r) => r.id === c)!.status, 'deleted');
  t.is(await readCheckpoint(env.orm), last);
  // No signing secret reaches Postgres in any column.
  const dump = JSON.stringify(await env.orm.em.fork().execute('select * from endpoints'));
  t.false(dump.includes('sealed'));
});

test("a command's state written through is never moved back: not by the projector behind it, not by an older write", async (t) => {
  const env = await setup('write_through');
  const id = newId();
  const first = created(id, 'tenant_a');
  const second = updated(id, { description: 'second' });
  const third = updated(id, { description: 'third', url: 'https://example.com/third' });
  const s1 = await env.publish(first);
  const s2 = await env.publish(second);
  // The third command's state, written through before its event reaches the projector (here: before the
  // projector runs at all, and before the event is even in the stream).
  const state1 = applyEndpointEvent(undefined, first, s1);
  const state2 = applyEndpointEvent(state1, second, s2);
  const state3 = applyEndpointEvent(state2, third, s2 + 1);
  await writeEndpointState(env.orm.em.fork(), state3);
  await writeEndpointState(env.orm.em.fork(), state2);
  t.like((await projectedRows(env.orm))[0], { description: 'third', version: s2 + 1 }, 'an older write leaves a newer row');
  // One event per batch: each would write its row back to an older state if writes were not versioned.
  const projector = await startEndpointProjector(env, { batchSize: 1 });
  t.teardown(() => projector.stop());
  await projector.waitFor(s2, WAIT);
  t.like((await projectedRows(env.orm))[0], { description: 'third', url: 'https://example.com/third', version: s2 + 1 });
  // The event arrives; the projector takes the row as it is and goes on from it.
  t.is(await env.publish(third), s2 + 1);
  const last = await env.publish(updated(id, { events: ['*'] }));
  await projector.waitFor(last, WAIT);
  t.deepEqual(await projectedRows(env.orm), expectedRows(env.published));
  t.is((await readSkipped(env.orm, 'endpoints')).total, 0, 'an event already written through is no skip');
});

test('a projector stopped mid-stream and restarted applies every event exactly once', async (t) => {
  const env = await setup('restart');
  await installAudit(env.orm);
  const ids = Array.from({ length: 5 }, newId);
  const events = workload(ids, 30);
  const half = Math.floor(events.length / 2);

  let projector: EndpointProjector = await startEndpointProjector(env, { batchSize: 1 });
  t.teardown(() => projector.stop());
  const midSeq = await publishAll(env, events.slice(0, half));
  await projector.waitFor(Math.floor(midSeq / 2), WAIT);
  // Stop while the first half is still being applied, publish the rest while no projector runs.
  await projector.stop();
  const stoppedAt = await readCheckpoint(env.orm);
  t.true(stoppedAt >= Math.floor(midSeq / 2));
  const last = await publishAll(env, events.slice(half));
  projector = await startEndpointProjector(env, { batchSize: 1 });
  t.is(projector.lastSeq(), stoppedAt);
  await projector.waitFor(last, WAIT);

  t.deepEqual(await projectedRows(env.orm), expectedRows(env.published));
  // Each event wrote its row exactly once, in stream order; the checkpoint only ever moved forward.
  const expectedWrites = env.published.map(({ seq, event }) => `${event!.id}@${seq}`);
  t.deepEqual(await auditedRowWrites(env.orm), expectedWrites);
  const checkpoints = await auditedCheckpoints(env.orm);
  t.true(isIncreasing(checkpoints));
  t.is(checkpoints.at(-1), last);
});

test('two projectors running at once apply every event exactly once and agree with one', async (t) => {
  const env = await setup('concurrent');
  await installAudit(env.orm);
  const ids = Array.from({ length: 6 }, newId);
  const events = workload(ids, 40);
  // Two instances start from the same checkpoint and read the same stream concurrently.
  const [p1, p2] = await Promise.all([
    startEndpointProjector(env, { batchSize: 1 }),
    startEndpointProjector(env, { batchSize: 1 }),
  ]);
  t.teardown(() => Promise.all([p1.stop(), p2.stop()]));
  const last = await publishAll(env, events);
  await Promise.all([p1.waitFor(last, WAIT), p2.waitFor(last, WAIT)]);
  t.deepEqual(await projectedRows(env.orm), expectedRows(env.published));
  t.deepEqual(await auditedRowWrites(env.orm), env.published.map(({ seq, event }) => `${event!.id}@${seq}`));
  t.true(isIncreasing(await auditedCheckpoints(env.orm)));

  // A third projector with the default batch size joins late: it only skips and agrees.
  const p3 = await startEndpointProjector(env);
  t.teardown(() => p3.stop());
  const more = await publishAll(env, workload([ids[0]!], 3).slice(1));
  await Promise.all([p1.waitFor(more, WAIT), p2.waitFor(more, WAIT), p3.waitFor(more, WAIT)]);
  t.deepEqual(await projectedRows(env.orm), expectedRows(env.published));
  t.true(isIncreasing(await auditedCheckpoints(env.orm)));
});

test('a rebuild after dropping the rows equals the live projection, also with a live projector running', async (t) => {
  const env = await setup('rebuild');
  const ids = Array.from({ length: 20 }, newId);
  const projector = await startEndpointProjector(env);
  t.teardown(() => projector.stop());
  const last = await publishAll(env, workload(ids, 8));
  await projector.waitFor(last, WAIT);
  const live = await projectedRows(env.orm);
  t.deepEqual(live, expectedRows(env.published));

  await env.orm.em.fork().execute('delete from endpoints');
  const progress: [number, number][] = [];
  const { applied } = await rebuildEndpointProjection(env, (done, total) => progress.push([done, total]));
  t.is(applied, env.published.length);
  t.deepEqual(progress.at(-1), [last, last]);
  t.deepEqual(await projectedRows(env.orm), live);
  t.is(await readCheckpoint(env.orm), last);

  // Events keep arriving while a rebuild runs beside the live projector: nothing lost, nothing doubled.
  const more = workload(Array.from({ length: 5 }, newId), 4);
  const publishing = publishAll(env, more);
  await rebuildEndpointProjection(env);
  const end = await publishing;
  await projector.waitFor(end, WAIT);
  t.deepEqual(await projectedRows(env.orm), expectedRows(env.published));
  t.is(await readCheckpoint(env.orm), end);
});

test('a rebuild of an empty stream empties the projection', async (t) => {
  const env = await setup('rebuild_empty');
  await env.orm.em.fork().insert(EndpointRecord, {
    id: newId(), tenant: 'x', url: 'https://example.com', events: ['*'], description: null, status: 'active',
    createdAt: new Date(), updatedAt: new Date(), version: 7,
  });
  t.deepEqual(await rebuildEndpointProjection(env), { applied: 0, skipped: 0 });
  t.deepEqual(await projectedRows(env.orm), []);
  t.is(await readCheckpoint(env.orm), 0);
});

test('malformed messages are logged with their sequence and skipped; the checkpoint moves past them', async (t) => {
  const lines: string[] = [];
  const env = await setup('malformed', createLogger({ level: 'warn', write: (l) => lines.push(l) }));
  const projector = await startEndpointProjector(env);
  t.teardown(() => projector.stop());
  const good = newId();
  const bad: number[] = [];
  bad.push(await env.publishRaw(endpointSubject('x'), 'not json {'));
  bad.push(await env.publishRaw(endpointSubject('x'), JSON.stringify({ v: 1, type: 'endpoint.exploded', id: 'webhook_x' })));
  bad.push(await env.publishRaw(endpointSubject('x'), JSON.stringify({ v: 2, type: 'endpoint.created', id: 'webhook_x' })));
  bad.push(await env.publishRaw(endpointSubject('x'), JSON.stringify([1, 2, 3])));
  // Well-typed but unusable: a created event without a URL, an update of an endpoint that never existed.
  const noUrl = { ...created(newId(), 'tenant_a'), url: undefined };
  bad.push(await env.publishRaw(endpointSubject(noUrl.id), JSON.stringify(noUrl)));
  bad.push(await env.publish(updated(newId(), { description: 'orphan' })));
  await env.publish(created(good, 'tenant_a'));
  const last = await env.publish(updated(good, { description: 'still applied' }));
  await projector.waitFor(last, WAIT);

  const rows = await projectedRows(env.orm);
  t.deepEqual(rows.map((r) => r.id), [good]);
  t.is(rows[0]!.description, 'still applied');
  t.is(rows[0]!.version, last);
  t.is(await readCheckpoint(env.orm), last);
  const warned = lines.map((l) => JSON.parse(l) as { msg: string; seq?: number }).filter((l) => l.msg.startsWith('skipped'));
  t.deepEqual(warned.map((l) => l.seq), bad);
});

test('waitFor rejects with a clear error when the projection does not get there in time', async (t) => {
  const env = await setup('timeout');
  const projector = await startEndpointProjector(env);
  t.teardown(() => projector.stop());
  const seq = await env.publish(created(newId(), 'tenant_a'));
  await projector.waitFor(seq, WAIT);
  const error = await t.throwsAsync(projector.waitFor(seq + 5, 200), { instanceOf: ProjectionLagError });
  t.regex(error.message, new RegExp(`sequence ${seq + 5} within 200 ms \\(it is at ${seq}\\)`));
});

test('waitFor sees sequences applied by another instance', async (t) => {
  const env = await setup('other_instance');
  const seq = await env.publish(created(newId(), 'tenant_a'));
  const p1 = await startEndpointProjector(env);
  t.teardown(() => p1.stop());
  await p1.waitFor(seq, WAIT);
  await p1.stop();
  // p2 starts at the checkpoint; p3, stopped at once, learns of later events only from Postgres.
  const p2 = await startEndpointProjector(env);
  t.teardown(() => p2.stop());
  const p3 = await startEndpointProjector(env);
  await p3.stop();
  const next = await env.publish(updated(env.published[0]!.event!.id, { description: 'x' }));
  await p2.waitFor(next, WAIT);
  await p3.waitFor(next, WAIT);
  t.is(p3.lastSeq(), seq);
});

test('the projector rides out a nats-server restart', async (t) => {
  const env = await setup('nats_restart');
  const projector = await startEndpointProjector(env);
  t.teardown(() => projector.stop());
  const ids = Array.from({ length: 3 }, newId);
  const events = workload(ids, 4);
  await projector.waitFor(await publishAll(env, events.slice(0, 6)), WAIT);
  await env.server.stop();
  await env.server.start();
  // The client reconnects on its own; wait until JetStream answers again (a retried publish could double).
  for (let i = 0; ; i++) {
    try { await (await env.js.jetstreamManager()).streams.info(ENDPOINTS_STREAM); break; } catch (e) { if (i > 100) throw e; await new Promise((r) => setTimeout(r, 100)); }
  }
  const last = await publishAll(env, events.slice(6));
  await projector.waitFor(last, WAIT);
  t.deepEqual(await projectedRows(env.orm), expectedRows(env.published));
});

test('an event whose text Postgres cannot hold is skipped, written down and counted; every tenant goes on', async (t) => {
  // Issue 23: a description holding U+0000, written with the service credential, stopped every tenant's writes.
  const lines: string[] = [];
  const env = await setup('nul', createLogger({ level: 'warn', write: (l) => lines.push(l) }));
  const metrics = createServiceMetrics();
  const projector = await startEndpointProjector({ ...env, skipped: metrics.projectionSkipped });
  t.teardown(() => projector.stop());
  const [evil, other, late] = [newId(), newId(), newId()];
  const poison: number[] = [];
  poison.push(await env.publishRaw(endpointSubject(evil), JSON.stringify({ ...created(evil, 'tenant_evil'), description: 'a\u0000b' })));
  await env.publish(created(other, 'tenant_good'));
  poison.push(await env.publishRaw(endpointSubject(other), JSON.stringify(updated(other, { events: ['user.created', 'x\u0000'] as EventPattern[] }))));
  const last = await env.publish(created(late, 'tenant_late'));
  await projector.waitFor(last, WAIT);
  t.deepEqual((await projectedRows(env.orm)).map((r) => r.id).sort(), [other, late].sort());
  const skipped = await readSkipped(env.orm, 'endpoints');
  t.deepEqual(skipped.latest.map((s) => s.seq), [...poison].reverse());
  t.true(skipped.latest.every((s) => s.reason.includes('U+0000')), JSON.stringify(skipped.latest));
  t.is(metrics.projectionSkipped.get({ projection: 'endpoints' }), 2);
  t.deepEqual(lines.map((l) => JSON.parse(l) as { msg: string; seq?: number }).filter((l) => l.msg.startsWith('skipped')).map((l) => l.seq), poison);
  // A rebuild skips them the same way, and writes them down again.
  await projector.stop();
  const rebuilt = await rebuildEndpointProjection(env);
  t.is(rebuilt.skipped, 2);
  t.deepEqual((await projectedRows(env.orm)).map((r) => r.id).sort(), [other, late].sort());
  t.is((await readSkipped(env.orm, 'endpoints')).total, 2);
});

test('a batch Postgres refuses is applied again one event at a time: only the refused event is skipped', async (t) => {
  // A read model whose rows Postgres checks (an integer column): the fold accepts any text, so only the
  // store can refuse, as with a value no check foresaw.
  const env = await setup('refused');
  await env.orm.em.fork().execute('create table numbers (seq bigint primary key, n integer not null)');
  const model: ReadModel<string> = {
    name: 'endpoints', stream: ENDPOINTS_STREAM, kind: 'number',
    decode: (m) => ({ ok: true, message: new TextDecoder().decode(m.data) }),
    async load() { return this.empty(); },
    empty() {
      const rows: [number, string][] = [];
      return {
        apply(seq, text) { rows.push([seq, text]); return undefined; },
        async save(em) {
          for (const [seq, text] of rows) await em.execute('insert into numbers (seq, n) values (?, ?::integer)', [seq, text]);
          return rows.length;
        },
      };
    },
    async clear(em) { await em.execute('delete from numbers'); },
  };
  const metrics = createServiceMetrics();
  const bodies = ['1', '2', 'three', '4', '99999999999', '6'];
  const seqs: number[] = [];
  for (const b of bodies) seqs.push(await env.publishRaw(endpointSubject('n'), b));
  const projector = await startProjector(model, { ...env, skipped: metrics.projectionSkipped }, { batchSize: 50 });
  t.teardown(() => projector.stop());
  await projector.waitFor(seqs.at(-1)!, WAIT);
  const stored = await env.orm.em.fork().execute<{ n: number }[]>('select n from numbers order by seq');
  t.deepEqual(stored.map((r) => r.n), [1, 2, 4, 6]);
  const skipped = await readSkipped(env.orm, 'endpoints');
  t.deepEqual(skipped.latest.map((s) => s.seq), [seqs[4], seqs[2]]);
  t.true(skipped.latest.every((s) => s.reason.startsWith('refused by Postgres')));
  t.is(metrics.projectionSkipped.get({ projection: 'endpoints' }), 2);
  // Later batches are whole again: the next events are applied together.
  const more = [await env.publishRaw(endpointSubject('n'), '7'), await env.publishRaw(endpointSubject('n'), '8')];
  await projector.waitFor(more[1]!, WAIT);
  t.is((await env.orm.em.fork().execute('select n from numbers')).length, 6);
});

// A stop deletes its ordered consumer, but waits for that at most a second: on a nats-server 2.9.10
// cluster each delete took about 5 s, and the service stops three projectors within its shutdown deadline.
test('a stop deletes its consumer; with the server frozen, three stops still end within the shutdown deadline', async (t) => {
  const env = await setup('stop');
  const jsm = await env.js.jetstreamManager();
  const consumers = async () => (await jsm.consumers.list(ENDPOINTS_STREAM).next()).length;
  const last = await publishAll(env, workload([newId()], 3));
  const projector = await startEndpointProjector(env);
  await projector.waitFor(last, WAIT);
  t.is(await consumers(), 1);
  await projector.stop();
  t.is(await consumers(), 0, 'its consumer is deleted');

  const three = await Promise.all([1, 2, 3].map(() => startEndpointProjector(env)));
  t.teardown(() => Promise.all(three.map((p) => p.stop())));
  const pid = env.server.pid!;
  process.kill(pid, 'SIGSTOP');
  t.teardown(() => { process.kill(pid, 'SIGCONT'); });
  const at = Date.now();
  for (const p of three) await p.stop();
  const took = Date.now() - at;
  process.kill(pid, 'SIGCONT');
  t.log(`three stops with the server frozen: ${took} ms`);
  t.true(took < 10_000, `the stops took ${took} ms, past the 10 s shutdown deadline`);
});
