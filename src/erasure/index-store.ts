// The erasure index in Postgres (table erasure_index, issue 22): the one module that knows its SQL. One row
// per routed event per subject hash, written by the erasure-index projection, read and deleted by erasure,
// expired by the index retention. The primary key (tenant, subject_hash, events_seq) is the lookup: one
// subject's rows are found by the index, whatever the size of the table.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { IndexedEvent } from '../../streams/erasure-index.ts';

type Sql = Pick<EntityManager, 'execute'>;

/** Rows per insert statement (6 parameters each, far below Postgres's 65,535). */
const INSERT_CHUNK = 1000;

/** One event as erasure needs it: where its copies are. */
export type IndexRow = Pick<IndexedEvent, 'events_seq' | 'webhook_id' | 'deliveries'>;

/**
 * Write the rows of `events` (one per hash). Two writers index the same event: the event index
 * (projections/event-index.ts, every event, no deliveries) and the routers (the deliveries they stored),
 * so a row already there takes the deliveries it does not hold yet; a batch applied again changes nothing.
 */
export async function insertIndexRows(sql: Sql, events: readonly IndexedEvent[]): Promise<number> {
  // One row per key in a statement: Postgres refuses to update a row twice in one insert.
  const byKey = new Map<string, [string, string, number, string, IndexedEvent['deliveries']]>();
  for (const e of events) {
    for (const h of e.hashes) {
      const key = `${e.tenant}\0${h}\0${e.events_seq}`;
      const row = byKey.get(key);
      if (row) row[4] = [...row[4], ...e.deliveries];
      else byKey.set(key, [e.tenant, h, e.events_seq, e.webhook_id, e.deliveries]);
    }
  }
  const rows = [...byKey.values()].map(([tenant, h, seq, id, deliveries]) => [tenant, h, seq, id, JSON.stringify(deliveries)] as const);
  for (let i = 0; i < rows.length; i += INSERT_CHUNK) {
    const chunk = rows.slice(i, i + INSERT_CHUNK);
    await sql.execute(
      `insert into erasure_index (tenant, subject_hash, events_seq, webhook_id, deliveries, indexed_at)
       values ${chunk.map(() => '(?, ?, ?, ?, ?::jsonb, now())').join(', ')}
       on conflict (tenant, subject_hash, events_seq) do update set deliveries = erasure_index.deliveries || excluded.deliveries
       where not erasure_index.deliveries @> excluded.deliveries`, chunk.flat());
  }
  return rows.length;
}

/** The tenant's rows of any of `hashes` for events up to `upTo`, one per event. */
export async function subjectIndexRows(sql: Sql, tenant: string, hashes: readonly string[], upTo: number): Promise<IndexRow[]> {
  const rows = await sql.execute<{ events_seq: string; webhook_id: string; deliveries: IndexedEvent['deliveries'] }[]>(
    `select distinct on (events_seq) events_seq, webhook_id, deliveries from erasure_index
     where tenant = ? and subject_hash = any(?::text[]) and events_seq <= ? order by events_seq`, [tenant, `{${hashes.join(',')}}`, upTo]);
  return rows.map((r) => ({ events_seq: Number(r.events_seq), webhook_id: r.webhook_id, deliveries: r.deliveries }));
}

/** Delete the tenant's rows of `hashes` for these events; how many went. */
export async function deleteSubjectIndexRows(sql: Sql, tenant: string, hashes: readonly string[], eventsSeqs: readonly number[]): Promise<number> {
  if (eventsSeqs.length === 0) return 0;
  const rows = await sql.execute<{ n: string }[]>(
    `with gone as (delete from erasure_index where tenant = ? and subject_hash = any(?::text[]) and events_seq = any(?::bigint[]) returning 1)
     select count(*) as n from gone`, [tenant, `{${hashes.join(',')}}`, `{${eventsSeqs.join(',')}}`]);
  return Number(rows[0]?.n ?? 0);
}

/** Delete up to `limit` rows indexed before `before`; how many went. */
export async function deleteExpiredIndexRows(sql: Sql, before: Date, limit: number): Promise<number> {
  const rows = await sql.execute<{ n: string }[]>(`
    with expired as (select ctid from erasure_index where indexed_at < ? limit ?),
    gone as (delete from erasure_index e using expired where e.ctid = expired.ctid returning 1)
    select count(*) as n from gone`, [before, limit]);
  return Number(rows[0]?.n ?? 0);
}

/** Delete every row (a rebuild of the projection). */
export async function deleteAllIndexRows(sql: Sql): Promise<void> {
  await sql.execute('delete from erasure_index');
}

/** A row as the key rotation walks them: in primary-key order. */
export type KeyedIndexRow = IndexRow & { tenant: string; subject_hash: string };

/** Up to `limit` rows after `after` in primary-key order (a keyset page: none skipped or seen twice). */
export async function indexPage(sql: Sql, after: KeyedIndexRow | undefined, limit: number): Promise<KeyedIndexRow[]> {
  const rows = await sql.execute<(Omit<KeyedIndexRow, 'events_seq'> & { events_seq: string })[]>(
    `select tenant, subject_hash, events_seq, webhook_id, deliveries from erasure_index
     ${after ? 'where (tenant, subject_hash, events_seq) > (?, ?, ?)' : ''} order by tenant, subject_hash, events_seq limit ?`,
    [...(after ? [after.tenant, after.subject_hash, after.events_seq] : []), limit]);
  return rows.map((r) => ({ ...r, events_seq: Number(r.events_seq) }));
}

/** Replace one row by rows of `hashes` (same event, same age), in one statement; false when it was gone. */
export async function replaceIndexRow(sql: Sql, row: KeyedIndexRow, hashes: readonly string[]): Promise<boolean> {
  const done = await sql.execute<{ n: string }[]>(`
    with old as (delete from erasure_index where tenant = ? and subject_hash = ? and events_seq = ?
                 returning tenant, events_seq, webhook_id, deliveries, indexed_at),
    added as (insert into erasure_index (tenant, subject_hash, events_seq, webhook_id, deliveries, indexed_at)
              select old.tenant, h, old.events_seq, old.webhook_id, old.deliveries, old.indexed_at from old, unnest(?::text[]) h
              on conflict do nothing returning 1)
    select count(*) as n from old`, [row.tenant, row.subject_hash, row.events_seq, `{${hashes.join(',')}}`]);
  return Number(done[0]?.n ?? 0) > 0;
}
