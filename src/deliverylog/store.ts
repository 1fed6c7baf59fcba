// The delivery log in Postgres: the one module that knows its SQL. attempt_log holds one row per attempt;
// delivery_log one row per delivery (webhook-id and endpoint) with its latest attempt, which is what a
// search lists. Both are written by the attempt-log projection, a batch at a time, read by the admin role,
// expired after HOOKSTREAM_ATTEMPT_RETENTION and erased with their user, organization or tenant.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { AttemptLogEntry } from '../../streams/attempt-log.ts';

type Sql = Pick<EntityManager, 'execute'>;
/** Where the batch writes go: the transaction's connection, with parameters sent as such (see native). */
type Writer = Pick<EntityManager, 'execute' | 'getKysely'>;
type CompiledQuery = Parameters<ReturnType<EntityManager['getKysely']>['executeQuery']>[0];

/**
 * Run `text` ($1… placeholders) with `params` sent to Postgres as parameters. em.execute writes every
 * value into the SQL text (escaping it character by character), which cost more CPU than the rows
 * themselves for a batch of thousands of attempts.
 */
async function native(em: Writer, text: string, params: unknown[]): Promise<void> {
  const query = { sql: text, parameters: params, query: { kind: 'RawNode', sqlFragments: [text], parameters: [] }, queryId: { queryId: 'attempt_log' } };
  await em.getKysely().executeQuery(query as unknown as CompiledQuery);
}

/** Entries written per statement. */
const INSERT_CHUNK = 5000;

const ts = (ms: number | undefined): Date | null => (ms === undefined ? null : new Date(ms));

/** The latest entry of each delivery among `entries`, with how many attempts they stand for (a refusal is none). */
function latestByDelivery(entries: readonly AttemptLogEntry[]): { e: AttemptLogEntry; n: number; first: number }[] {
  const out = new Map<string, { e: AttemptLogEntry; n: number; first: number }>();
  for (const e of entries) {
    const key = `${e.webhook_id} ${e.endpoint}`;
    const d = out.get(key);
    const n = e.outcome === 'dropped' ? 0 : 1;
    if (!d) out.set(key, { e, n, first: e.at });
    else {
      d.n += n;
      d.first = Math.min(d.first, e.at);
      if (e.at > d.e.at || (e.at === d.e.at && e.attempt > d.e.attempt)) d.e = e;
    }
  }
  return [...out.values()];
}

/**
 * Write the entries: one row each in attempt_log, their deliveries' rows in delivery_log, their per-minute
 * counts in attempt_rates. One statement per table (per 5,000 entries), each column one array parameter.
 */
export async function insertAttempts(em: Writer, entries: readonly AttemptLogEntry[]): Promise<number> {
  for (let i = 0; i < entries.length; i += INSERT_CHUNK) {
    const chunk = entries.slice(i, i + INSERT_CHUNK);
    const col = <T>(f: (e: AttemptLogEntry) => T) => chunk.map(f);
    await native(em,
      `insert into attempt_log (tenant, endpoint_id, webhook_id, event_type, attempt, at, duration_ms, status_code, outcome, error_class, error, response_body, next_attempt_at)
       select * from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::timestamptz[], $7::int[], $8::int[], $9::text[], $10::text[], $11::text[], $12::text[], $13::timestamptz[])`,
      [col((e) => e.tenant), col((e) => e.endpoint), col((e) => e.webhook_id), col((e) => e.event), col((e) => e.attempt), col((e) => new Date(e.at)),
        col((e) => e.duration_ms), col((e) => e.status), col((e) => e.outcome), col((e) => e.error_class ?? null), col((e) => e.error ?? null),
        col((e) => e.body ?? null), col((e) => ts(e.next_at))]);
  }
  const deliveries = latestByDelivery(entries);
  for (let i = 0; i < deliveries.length; i += INSERT_CHUNK) {
    const chunk = deliveries.slice(i, i + INSERT_CHUNK);
    const col = <T>(f: (d: { e: AttemptLogEntry; n: number; first: number }) => T) => chunk.map(f);
    // The newer attempt decides the delivery's state; an older one applied later only adds to the count.
    await native(em,
      `insert into delivery_log (webhook_id, endpoint_id, tenant, event_type, first_at, last_at, attempts, last_attempt, outcome, status_code, duration_ms, error, next_attempt_at)
       select * from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::int[], $8::int[], $9::text[], $10::int[], $11::int[], $12::text[], $13::timestamptz[])
       on conflict (webhook_id, endpoint_id) do update set
         attempts = delivery_log.attempts + excluded.attempts,
         first_at = least(delivery_log.first_at, excluded.first_at),
         last_at = greatest(delivery_log.last_at, excluded.last_at),
         last_attempt = case when excluded.last_at >= delivery_log.last_at then excluded.last_attempt else delivery_log.last_attempt end,
         outcome = case when excluded.last_at >= delivery_log.last_at then excluded.outcome else delivery_log.outcome end,
         status_code = case when excluded.last_at >= delivery_log.last_at then excluded.status_code else delivery_log.status_code end,
         duration_ms = case when excluded.last_at >= delivery_log.last_at then excluded.duration_ms else delivery_log.duration_ms end,
         error = case when excluded.last_at >= delivery_log.last_at then excluded.error else delivery_log.error end,
         next_attempt_at = case when excluded.last_at >= delivery_log.last_at then excluded.next_attempt_at else delivery_log.next_attempt_at end`,
      [col((d) => d.e.webhook_id), col((d) => d.e.endpoint), col((d) => d.e.tenant), col((d) => d.e.event), col((d) => new Date(d.first)), col((d) => new Date(d.e.at)),
        col((d) => d.n), col((d) => d.e.attempt), col((d) => d.e.outcome), col((d) => d.e.status), col((d) => d.e.duration_ms), col((d) => d.e.error ?? null),
        col((d) => ts(d.e.next_at))]);
  }
  await addRates(em, entries);
  return entries.length;
}

/** Add the entries to their endpoints' per-minute counts, and to every endpoint's (endpoint ''). */
async function addRates(em: Writer, entries: readonly AttemptLogEntry[]): Promise<void> {
  const counts = new Map<string, { endpoint: string; tenant: string; minute: number; ok: number; failed: number }>();
  const add = (endpoint: string, tenant: string, minute: number, ok: boolean) => {
    const key = `${endpoint} ${minute}`;
    let c = counts.get(key);
    if (!c) counts.set(key, (c = { endpoint, tenant, minute, ok: 0, failed: 0 }));
    if (ok) c.ok++;
    else c.failed++;
  };
  for (const e of entries) {
    if (e.outcome === 'dropped') continue; // not an attempt
    const minute = Math.floor(e.at / 60_000) * 60_000;
    add(e.endpoint, e.tenant, minute, e.outcome === 'ok');
    add('', '', minute, e.outcome === 'ok');
  }
  const rows = [...counts.values()];
  if (rows.length === 0) return;
  await native(em,
    `insert into attempt_rates (endpoint_id, minute, tenant, ok, failed)
     select * from unnest($1::text[], $2::timestamptz[], $3::text[], $4::int[], $5::int[])
     on conflict (endpoint_id, minute) do update set ok = attempt_rates.ok + excluded.ok, failed = attempt_rates.failed + excluded.failed`,
    [rows.map((c) => c.endpoint), rows.map((c) => new Date(c.minute)), rows.map((c) => c.tenant), rows.map((c) => c.ok), rows.map((c) => c.failed)]);
}

export interface DeliveryLogRow {
  webhook_id: string;
  endpoint_id: string;
  tenant: string;
  event_type: string;
  first_at: Date;
  last_at: Date;
  attempts: number;
  last_attempt: number;
  outcome: string;
  status_code: number | null;
  duration_ms: number;
  error: string | null;
  next_attempt_at: Date | null;
}

export interface AttemptLogRow {
  endpoint_id: string;
  webhook_id: string;
  tenant: string;
  event_type: string;
  attempt: number;
  at: Date;
  duration_ms: number;
  status_code: number | null;
  outcome: string;
  error_class: string | null;
  error: string | null;
  response_body: string | null;
  next_attempt_at: Date | null;
}

export interface DeliveryFilter {
  tenant?: string;
  endpoint?: string;
  event?: string;
  webhookId?: string;
  /** Only these webhook-ids (a user's or organization's events, from the erasure index). */
  webhookIds?: string[];
  /** `queued`: waiting for another attempt; `failed`: the latest attempt failed (queued or dead). */
  status?: string;
  since?: Date;
  until?: Date;
}

/** Deliveries matching `f`, newest first (by their latest attempt), `limit` of them before the cursor. */
export async function searchDeliveries(sql: Sql, f: DeliveryFilter, page: { limit: number; before?: { at: Date; webhookId: string; endpoint: string } }): Promise<DeliveryLogRow[]> {
  const conds: string[] = [];
  const params: unknown[] = [];
  const add = (cond: string, ...values: unknown[]) => { conds.push(cond); params.push(...values); };
  if (f.tenant) add('tenant = ?', f.tenant);
  if (f.endpoint) add('endpoint_id = ?', f.endpoint);
  if (f.event) add('event_type = ?', f.event);
  if (f.webhookId) add('webhook_id = ?', f.webhookId);
  if (f.webhookIds) add('webhook_id = any(?::text[])', `{${f.webhookIds.join(',')}}`);
  if (f.status === 'queued') add("outcome = 'failed'");
  else if (f.status === 'failed') add("outcome in ('failed', 'dead')");
  else if (f.status) add('outcome = ?', f.status);
  if (f.since) add('last_at >= ?', f.since);
  if (f.until) add('last_at < ?', f.until);
  if (page.before) add('(last_at, webhook_id, endpoint_id) < (?, ?, ?)', page.before.at, page.before.webhookId, page.before.endpoint);
  return sql.execute<DeliveryLogRow[]>(
    `select webhook_id, endpoint_id, tenant, event_type, first_at, last_at, attempts, last_attempt, outcome, status_code, duration_ms, error, next_attempt_at
     from delivery_log${conds.length ? ` where ${conds.join(' and ')}` : ''}
     order by last_at desc, webhook_id desc, endpoint_id desc limit ?`, [...params, page.limit]);
}

/** Every recorded attempt of one webhook-id (to any endpoint, or to one), oldest first. */
export async function attemptsOf(sql: Sql, webhookId: string, endpoint?: string): Promise<AttemptLogRow[]> {
  return sql.execute<AttemptLogRow[]>(
    `select endpoint_id, webhook_id, tenant, event_type, attempt, at, duration_ms, status_code, outcome, error_class, error, response_body, next_attempt_at
     from attempt_log where webhook_id = ?${endpoint ? ' and endpoint_id = ?' : ''} order by at, attempt`, endpoint ? [webhookId, endpoint] : [webhookId]);
}

/** Delete up to `limit` rows (attempts first, then deliveries) older than `before`; how many went. */
export async function deleteExpiredAttempts(sql: Sql, before: Date, limit: number): Promise<number> {
  const del = async (table: string, column: string, n: number) => Number((await sql.execute<{ n: string }[]>(`
    with expired as (select ctid from ${table} where ${column} < ? limit ?),
    gone as (delete from ${table} t using expired where t.ctid = expired.ctid returning 1)
    select count(*) as n from gone`, [before, n]))[0]?.n ?? 0);
  let n = 0;
  for (const [table, column] of [['attempt_log', 'at'], ['delivery_log', 'last_at'], ['attempt_rates', 'minute']] as const) {
    if (n < limit) n += await del(table, column, limit - n);
  }
  return n;
}

/** Delete the tenant's rows of these webhook-ids (a user's erasure); how many went. */
export async function deleteAttemptsOf(sql: Sql, tenant: string, webhookIds: readonly string[]): Promise<number> {
  if (webhookIds.length === 0) return 0;
  const ids = `{${webhookIds.join(',')}}`;
  const rows = await sql.execute<{ n: string }[]>(`
    with a as (delete from attempt_log where tenant = ? and webhook_id = any(?::text[]) returning 1),
    d as (delete from delivery_log where tenant = ? and webhook_id = any(?::text[]) returning 1)
    select (select count(*) from a) + (select count(*) from d) as n`, [tenant, ids, tenant, ids]);
  return Number(rows[0]?.n ?? 0);
}

/** Delete every row of the tenant (it leaves); how many went. */
export async function deleteTenantAttempts(sql: Sql, tenant: string): Promise<number> {
  const rows = await sql.execute<{ n: string }[]>(`
    with a as (delete from attempt_log where tenant = ? returning 1),
    d as (delete from delivery_log where tenant = ? returning 1),
    r as (delete from attempt_rates where tenant = ? returning 1)
    select (select count(*) from a) + (select count(*) from d) + (select count(*) from r) as n`, [tenant, tenant, tenant]);
  return Number(rows[0]?.n ?? 0);
}

/** Delete every row (a rebuild of the projection). */
export async function deleteAllAttempts(sql: Sql): Promise<void> {
  await sql.execute('delete from attempt_log');
  await sql.execute('delete from delivery_log');
  await sql.execute('delete from attempt_rates');
}
