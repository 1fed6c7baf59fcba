// Dead letters in Postgres (table dead_letters): the one module that knows their SQL, their row, their
// status and their id. The dead-letter role stores them, the admin role lists, shows and replays them,
// and the key rotation seals them again; each goes through the functions here.
import type { EntityManager } from '@mikro-orm/postgresql';
import type { EventName } from '../domain/catalogue.ts';
import { newIdBody, type EndpointId, type TenantId } from '../domain/ids.ts';

export const DeadLetterStatus = {
  /** Retries ran out and nobody replayed it since. */
  Dead: 'dead',
  /** An operator replayed it; a replay that dies again makes it `dead` again. */
  Replayed: 'replayed',
} as const;
export type DeadLetterStatus = (typeof DeadLetterStatus)[keyof typeof DeadLetterStatus];
export const DEAD_LETTER_STATUSES: readonly DeadLetterStatus[] = Object.values(DeadLetterStatus);
export const isDeadLetterStatus = (s: unknown): s is DeadLetterStatus => DEAD_LETTER_STATUSES.includes(s as DeadLetterStatus);

export type DeadLetterId = string & { readonly __brand: 'DeadLetterId' };
const DEAD_LETTER_ID = /^dl_[0-9a-z]{1,64}$/;
export const isDeadLetterId = (s: unknown): s is DeadLetterId => typeof s === 'string' && DEAD_LETTER_ID.test(s);
export const newDeadLetterId = (): DeadLetterId => `dl_${newIdBody()}` as DeadLetterId;

/** Timestamps come back from raw queries as text (MikroORM leaves pg's date parsing off). */
export type Timestamp = Date | string;
export const iso = (t: Timestamp): string => new Date(t).toISOString();

/** A dead_letters row as the driver returns it, without the sealed message. */
export interface DeadLetterRow {
  id: DeadLetterId;
  endpoint_id: string;
  tenant: string;
  webhook_id: string;
  event_type: string;
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  failed_at: Timestamp;
  created_at: Timestamp;
  dead_count: number;
  replay_count: number;
  last_replayed_at: Timestamp | null;
  status: DeadLetterStatus;
  /** The trace of the delivery that died last (issue 20); null when it carried none. */
  trace_id: string | null;
}

export interface SealedDeadLetterRow extends DeadLetterRow {
  /** The original message sealed to the dead-letter public key. */
  sealed: Buffer;
  /** Its authentication tag (tag.ts); null on a row stored before tags. */
  tag: Buffer | null;
  /** Keyed hashes of its subject ids (null before they were kept); read by the key rotation only. */
  subject_hashes?: string[] | null;
}

/** Which dead letters a list or a bulk replay covers; every criterion given must hold. */
export interface DeadLetterFilter {
  tenant?: TenantId;
  endpoint?: EndpointId;
  event?: EventName;
  /** On failed_at, inclusive. */
  since?: Date;
  /** On failed_at, exclusive. */
  until?: Date;
  status?: DeadLetterStatus;
  /** The delivery's webhook-id (msg_…): a list finds the dead letters of one event (issue 19). */
  webhookId?: string;
}

/** What the dead-letter role knows of a delivery that ran out of retries. */
export interface NewDeadLetter {
  endpointId: string;
  tenant: string;
  webhookId: string;
  eventType: string;
  attempts: number;
  lastStatus: number | null;
  lastError: string | null;
  failedAt: string;
  sealed: Uint8Array;
  /** The authentication tag of the row's identity and the unsealed message (tag.ts). */
  tag: Uint8Array;
  /** The dead message's place in its work queue: the same advisory again names the same place. */
  sourceStream: string;
  sourceSeq: number;
  /** Keyed hashes of the subject ids its message carries (src/erasure/subject-hash.ts), for erasure. */
  subjectHashes?: string[];
  /** The trace id its traceparent names (issue 20). */
  traceId?: string | null;
}

type Sql = Pick<EntityManager, 'execute'>;

/** A Postgres text[] literal of subject hashes (hex digits only: nothing to quote), passed as one parameter. */
const hashArray = (hashes: readonly string[]): string => `{${hashes.filter((h) => /^[0-9a-f]+$/.test(h)).join(',')}}`;

/** A dead letter erasure deleted, and where its replays were published (some may still be queued). */
export interface ErasedDeadLetter {
  id: string; endpoint_id: string; webhook_id: string; replay_count: number;
  /** Where each replay since migration 0015 was queued; replays before it are not here (replay_count says how many). */
  replayed_to: ReplayLocation[];
}

/**
 * Delete the tenant's dead letters whose message carries one of the subject hashes (erasure, issue 22).
 * A replay in progress holds the row's lock: the delete waits for it and returns the replay's location.
 */
export async function deleteSubjectDeadLetters(sql: Sql, tenant: string, hashes: readonly string[]): Promise<ErasedDeadLetter[]> {
  return sql.execute<ErasedDeadLetter[]>(
    'delete from dead_letters where tenant = ? and subject_hashes && ?::text[] returning id, endpoint_id, webhook_id, replay_count, replayed_to', [tenant, hashArray(hashes)]);
}

/** The tenant's dead letters stored before subject hashes (migration 0012), with their sealed messages. */
export async function unhashedDeadLetters(sql: Sql, tenant: string): Promise<SealedDeadLetterRow[]> {
  return sql.execute<SealedDeadLetterRow[]>(`select ${COLUMNS}, sealed, tag from dead_letters where tenant = ? and subject_hashes is null`, [tenant]);
}

/** Delete dead letters by id. */
export async function deleteDeadLetters(sql: Sql, ids: readonly string[]): Promise<ErasedDeadLetter[]> {
  if (ids.length === 0) return [];
  return sql.execute<ErasedDeadLetter[]>(`delete from dead_letters where id in (${ids.map(() => '?').join(',')}) returning id, endpoint_id, webhook_id, replay_count, replayed_to`, [...ids]);
}

const COLUMNS = `id, endpoint_id, tenant, webhook_id, event_type, attempts, last_status, last_error, failed_at, created_at,
  dead_count, replay_count, last_replayed_at, status, trace_id`;
// Ids compare byte-wise whatever the database's locale: they are time-ordered in that order.
const ID = 'id collate "C"';

const UPSERT = `
insert into dead_letters (id, endpoint_id, tenant, webhook_id, event_type, attempts, last_status, last_error, failed_at,
                          sealed, tag, source_stream, source_seq, subject_hashes, trace_id, created_at, dead_count, replay_count, status)
values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?::text[], ?, now(), 1, 0, '${DeadLetterStatus.Dead}')
on conflict (endpoint_id, webhook_id) do update set
  -- the same advisory again (same source message) changes nothing; a replay that died again does
  dead_count = dead_letters.dead_count + case when dead_letters.source_stream = excluded.source_stream
                                               and dead_letters.source_seq = excluded.source_seq then 0 else 1 end,
  attempts = excluded.attempts, last_status = excluded.last_status, last_error = excluded.last_error,
  failed_at = excluded.failed_at, sealed = excluded.sealed, tag = excluded.tag, source_stream = excluded.source_stream,
  source_seq = excluded.source_seq, subject_hashes = excluded.subject_hashes, trace_id = excluded.trace_id,
  status = '${DeadLetterStatus.Dead}'
returning (xmax = 0) as inserted, id, dead_count`;

/** Of these deliveries (endpoint and webhook-id), those that have a dead letter, as `<endpoint> <webhook-id>`. */
export async function deadLetterPairs(sql: Sql, deliveries: readonly { endpoint: string; webhookId: string }[]): Promise<Set<string>> {
  if (deliveries.length === 0) return new Set();
  const rows = await sql.execute<{ endpoint_id: string; webhook_id: string }[]>(
    `select endpoint_id, webhook_id from dead_letters where (endpoint_id, webhook_id) in (${deliveries.map(() => '(?, ?)').join(', ')})`,
    deliveries.flatMap((d) => [d.endpoint, d.webhookId]));
  return new Set(rows.map((r) => `${r.endpoint_id} ${r.webhook_id}`));
}

/**
 * Store a dead letter, one per endpoint and webhook-id: a repeated advisory finds its record, a replay
 * that died again makes it `dead` again (dead_count + 1). `inserted` says whether the row is new.
 */
export async function storeDeadLetter(sql: Sql, d: NewDeadLetter): Promise<{ inserted: boolean; id: DeadLetterId; dead_count: number } | undefined> {
  const [row] = await sql.execute<{ inserted: boolean; id: DeadLetterId; dead_count: number }[]>(UPSERT, [
    newDeadLetterId(), d.endpointId, d.tenant, d.webhookId, d.eventType, d.attempts, d.lastStatus, d.lastError, d.failedAt,
    Buffer.from(d.sealed), Buffer.from(d.tag), d.sourceStream, d.sourceSeq, hashArray(d.subjectHashes ?? []), d.traceId ?? null,
  ]);
  return row;
}

/** One dead letter with its sealed message; `forUpdate` locks the row for the rest of the transaction. */
export async function findDeadLetter(sql: Sql, id: DeadLetterId, opts: { forUpdate?: boolean } = {}): Promise<SealedDeadLetterRow | undefined> {
  const [row] = await sql.execute<SealedDeadLetterRow[]>(`select ${COLUMNS}, sealed, tag from dead_letters where id = ?${opts.forUpdate ? ' for update' : ''}`, [id]);
  return row;
}

/** The dead letter made from a queued message (its DELIVERIES stream and sequence), if there is one. */
export async function findSourceDeadLetter(sql: Sql, stream: string, seq: number): Promise<DeadLetterRow | undefined> {
  const [row] = await sql.execute<DeadLetterRow[]>(`select ${COLUMNS} from dead_letters where source_stream = ? and source_seq = ?`, [stream, seq]);
  return row;
}

/** The dead letter of one delivery (endpoint and webhook-id), if it died. */
export async function findDeliveryDeadLetter(sql: Sql, endpointId: string, webhookId: string): Promise<DeadLetterRow | undefined> {
  const [row] = await sql.execute<DeadLetterRow[]>(`select ${COLUMNS} from dead_letters where endpoint_id = ? and webhook_id = ?`, [endpointId, webhookId]);
  return row;
}

function where(filter: DeadLetterFilter): { sql: string; params: unknown[] } {
  const conds: string[] = [];
  const params: unknown[] = [];
  const add = (cond: string, value: unknown) => { conds.push(cond); params.push(value); };
  if (filter.tenant) add('tenant = ?', filter.tenant);
  if (filter.endpoint) add('endpoint_id = ?', filter.endpoint);
  if (filter.event) add('event_type = ?', filter.event);
  if (filter.since) add('failed_at >= ?', filter.since);
  if (filter.until) add('failed_at < ?', filter.until);
  if (filter.status) add('status = ?', filter.status);
  if (filter.webhookId) add('webhook_id = ?', filter.webhookId);
  return { sql: conds.length ? conds.join(' and ') : 'true', params };
}

/** Newest first, `limit` rows below `before` (a keyset page on the time-ordered id). */
export async function listDeadLetters(sql: Sql, filter: DeadLetterFilter, page: { before?: DeadLetterId; limit: number }): Promise<DeadLetterRow[]> {
  const w = where(filter);
  return sql.execute<DeadLetterRow[]>(
    `select ${COLUMNS} from dead_letters where ${w.sql}${page.before ? ` and ${ID} < ?` : ''} order by ${ID} desc limit ?`,
    [...w.params, ...(page.before ? [page.before] : []), page.limit],
  );
}

/** Oldest first, the ids of `limit` rows above `after`. */
export async function deadLetterIds(sql: Sql, filter: DeadLetterFilter, page: { after?: DeadLetterId; limit: number }): Promise<DeadLetterId[]> {
  const w = where(filter);
  const rows = await sql.execute<{ id: DeadLetterId }[]>(
    `select id from dead_letters where ${w.sql}${page.after ? ` and ${ID} > ?` : ''} order by ${ID} asc limit ?`,
    [...w.params, ...(page.after ? [page.after] : []), page.limit],
  );
  return rows.map((r) => r.id);
}

export async function countDeadLetters(sql: Sql, filter: DeadLetterFilter = {}): Promise<number> {
  const w = where(filter);
  const [row] = await sql.execute<{ n: number }[]>(`select count(*)::int as n from dead_letters where ${w.sql}`, w.params);
  return row?.n ?? 0;
}

/** Record the n-th replay of a dead letter; returns the row after it. */
/** Where a replay was published: erasure deletes it there while it is still queued. */
export type ReplayLocation = [stream: string, seq: number];

export async function markReplayed(sql: Sql, id: DeadLetterId, replayCount: number, at: ReplayLocation): Promise<DeadLetterRow> {
  const [row] = await sql.execute<DeadLetterRow[]>(
    `update dead_letters set status = '${DeadLetterStatus.Replayed}', replay_count = ?, last_replayed_at = now(),
       replayed_to = replayed_to || ?::jsonb where id = ? returning ${COLUMNS}`,
    [replayCount, JSON.stringify([at]), id],
  );
  return row!;
}

/** Rows with their sealed messages and tags in primary-key order after `after`: keyset pages that skip or repeat no row. */
export async function sealedPage(sql: Sql, after: string, limit: number): Promise<SealedDeadLetterRow[]> {
  return sql.execute<SealedDeadLetterRow[]>(`select ${COLUMNS}, sealed, tag, subject_hashes from dead_letters where id > ? order by id limit ?`, [after, limit]);
}

/** Replace the sealed message and its tag only if the row still holds `from`; false when it changed meanwhile. */
export async function replaceSealed(sql: Sql, id: DeadLetterId, from: Buffer, to: { sealed: Uint8Array; tag: Uint8Array; subjectHashes: readonly string[] }): Promise<boolean> {
  const updated = await sql.execute<{ id: string }[]>(
    'update dead_letters set sealed = ?, tag = ?, subject_hashes = ?::text[] where id = ? and sealed = ? returning id',
    [Buffer.from(to.sealed), Buffer.from(to.tag), hashArray(to.subjectHashes), id, from],
  );
  return updated.length > 0;
}

/** The identity a row's tag binds (tag.ts). */
export const rowIdentity = (row: Pick<DeadLetterRow, 'endpoint_id' | 'tenant' | 'webhook_id' | 'event_type'>) => ({ endpointId: row.endpoint_id, tenant: row.tenant, webhookId: row.webhook_id, eventType: row.event_type });

/**
 * Delete up to `limit` dead letters that died, and were last replayed, before `before` (retention,
 * issue 22); how many went. Rows another instance is deleting are skipped, not waited for.
 */
export async function deleteExpiredDeadLetters(sql: Sql, before: Date, limit: number): Promise<number> {
  const rows = await sql.execute<{ id: string }[]>(`
    with expired as (
      select id from dead_letters where failed_at < ? and coalesce(last_replayed_at, failed_at) < ?
      limit ? for update skip locked)
    delete from dead_letters d using expired where d.id = expired.id returning d.id`, [before, before, limit]);
  return rows.length;
}
