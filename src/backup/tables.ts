// The Postgres tables a backup keeps: what nothing else can rebuild (API keys, operators, the audit log,
// dead letters, idempotency records, tenant limits, the delivery log, and any table added later). Left
// out: the projections of NATS streams (endpoints, the erasure index and their checkpoints, rebuilt or
// meaningless without the streams they follow), sessions, and the migrations' own table.
import type { EntityManager } from '@mikro-orm/postgresql';

const DERIVED = new Set(['endpoints', 'projection_checkpoints', 'projection_skips', 'erasure_index', 'console_sessions', 'portal_sessions']);
const PAGE = 500;

const ident = (name: string) => `"${name.replace(/"/g, '""')}"`;

/** The tables a backup holds, by name. */
export async function backedUpTables(em: EntityManager): Promise<string[]> {
  const rows = await em.execute<{ name: string }[]>(
    "select table_name as name from information_schema.tables where table_schema = current_schema() and table_type = 'BASE TABLE' order by table_name");
  return rows.map((r) => r.name).filter((name) => !DERIVED.has(name) && !name.startsWith('mikro_orm'));
}

/** A table's rows as JSON text, a page at a time in storage order (call inside one repeatable-read transaction). */
export async function* readTable(em: EntityManager, table: string): AsyncGenerator<string> {
  let after = '(0,0)';
  for (;;) {
    const rows = await em.execute<{ ctid: string; row: string }[]>(
      `select t.ctid::text as ctid, row_to_json(t)::text as row from ${ident(table)} t where t.ctid > ?::tid order by t.ctid limit ${PAGE}`, [after]);
    for (const r of rows) yield r.row;
    if (rows.length < PAGE) return;
    after = rows.at(-1)!.ctid;
  }
}

export async function countRows(em: EntityManager, table: string): Promise<number> {
  const [row] = await em.execute<{ n: number }[]>(`select count(*)::int as n from ${ident(table)}`);
  return row!.n;
}

/** Insert rows read by readTable, ids included; Postgres converts each JSON field back to its column's type. */
export async function writeRows(em: EntityManager, table: string, rows: string[]): Promise<void> {
  if (rows.length === 0) return;
  await em.execute(`insert into ${ident(table)} overriding system value select * from json_populate_recordset(null::${ident(table)}, ?::json)`, [`[${rows.join(',')}]`]);
}

/** Move the table's id sequences past the ids restored, so the next insert does not take one of them. */
export async function resetSequences(em: EntityManager, table: string): Promise<void> {
  const columns = await em.execute<{ name: string; seq: string | null }[]>(
    'select column_name as name, pg_get_serial_sequence(?, column_name) as seq from information_schema.columns where table_schema = current_schema() and table_name = ?',
    [ident(table), table]);
  for (const { name, seq } of columns) {
    if (seq) await em.execute(`select setval(?, coalesce((select max(${ident(name)}) from ${ident(table)}), 0) + 1, false)`, [seq]);
  }
}
