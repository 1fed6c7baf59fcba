// Dead letters for operators: list (filtered, keyset-paged on the time-ordered id), show (opened), and
// replay. A replay re-publishes the original message to its work-queue subject with its original
// webhook-id and a fresh Nats-Msg-Id (`<webhookId>.<endpoint>.replay.<n>`): receivers that deduplicate by
// webhook-id stay correct, and JetStream's duplicate window makes a retried replay of the same n a no-op.
// If the replay fails again it runs the retry schedule and the dead-letter handler's upsert marks the
// record dead again (dead_count + 1).
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { DeliveryHeader } from '../../streams/deliveries.ts';
import { EndpointStatus } from '../domain/endpoint.ts';
import type { EndpointId } from '../domain/ids.ts';
import { readEndpoint } from '../endpoints/read.ts';
import { conflict, describe, ErrorCode, HookstreamError, isHookstreamError, notFound } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { decodeCursor, encodeCursor } from './cursor.ts';
import type { DeadLetterOpener } from './opener.ts';
import type {
  AdminErrorCode, DeadLetterOut, DeadLetterReplayOut, DeadLetterShowOut, DeadLettersListOut, DeadLettersReplayManyOut, OriginalMessageOut,
} from './protocol.ts';
import type { DeadLetterFilter, Page } from './requests.ts';

/** Timestamps come back from raw queries as text (MikroORM leaves pg's date parsing off). */
type Timestamp = Date | string;
export const iso = (t: Timestamp): string => new Date(t).toISOString();

/** A dead_letters row as the driver returns it. */
interface Row {
  id: string;
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
  status: 'dead' | 'replayed';
}

const COLUMNS = `id, endpoint_id, tenant, webhook_id, event_type, attempts, last_status, last_error, failed_at, created_at,
  dead_count, replay_count, last_replayed_at, status`;
// Ids compare byte-wise whatever the database's locale: they are time-ordered in that order.
const ID = 'id collate "C"';

export function toOut(r: Row): DeadLetterOut {
  return {
    id: r.id, endpoint_id: r.endpoint_id, tenant: r.tenant, webhook_id: r.webhook_id, event_type: r.event_type,
    attempts: r.attempts, last_status: r.last_status, last_error: r.last_error,
    failed_at: iso(r.failed_at), created_at: iso(r.created_at),
    dead_count: r.dead_count, replay_count: r.replay_count,
    last_replayed_at: r.last_replayed_at ? iso(r.last_replayed_at) : null, status: r.status,
  };
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
  return { sql: conds.length ? conds.join(' and ') : 'true', params };
}

/** Opened original message, body parsed (it is the JSON body that was POSTed). */
function messageOut(opener: DeadLetterOpener, sealed: Buffer): OriginalMessageOut {
  const original = opener.open(new Uint8Array(sealed));
  const text = Buffer.from(original.body_base64, 'base64').toString('utf8');
  let body: unknown;
  try { body = JSON.parse(text); } catch { body = text; }
  return { subject: original.subject, headers: original.headers, body };
}

export interface DeadLetters {
  list(filter: DeadLetterFilter, page: Page): Promise<DeadLettersListOut>;
  show(id: string): Promise<DeadLetterShowOut>;
  replay(id: string, opts: { force: boolean }): Promise<DeadLetterReplayOut>;
  replayMany(filter: DeadLetterFilter, page: Page): Promise<DeadLettersReplayManyOut>;
}

export function createDeadLetters(deps: {
  orm: MikroORM;
  js: JetStreamClient;
  jsm: JetStreamManager;
  opener: DeadLetterOpener;
  log: Logger;
  metrics: ServiceMetrics;
}): DeadLetters {
  const { orm, js, jsm, opener, log, metrics } = deps;
  const run = <T>(sql: string, params: unknown[]) => orm.em.fork().execute<T[]>(sql, params);

  async function replayLocked(em: EntityManager, id: string, force: boolean): Promise<DeadLetterReplayOut> {
    const [row] = await em.execute<(Row & { sealed: Buffer })[]>(`select ${COLUMNS}, sealed from dead_letters where id = ? for update`, [id]);
    if (!row) throw notFound(`dead letter ${id}`);
    if (row.status === 'replayed' && !force) {
      throw conflict(`dead letter ${id} was already replayed (${row.replay_count}x, last at ${row.last_replayed_at ? iso(row.last_replayed_at) : '?'}); `
        + 'its delivery may still be running: see deliveries show, or pass force to replay again');
    }
    const original = opener.open(new Uint8Array(row.sealed));
    // A deleted endpoint has no consumer: the message would sit in its work queue forever.
    const endpoint = await readEndpoint(js, jsm, row.endpoint_id as EndpointId);
    if (!endpoint || endpoint.status !== EndpointStatus.Active) {
      throw conflict(`endpoint ${row.endpoint_id} is ${endpoint ? endpoint.status : 'gone'}; restore it before replaying`);
    }
    const n = row.replay_count + 1;
    const h = natsHeaders();
    for (const [name, values] of Object.entries(original.headers)) {
      // Nats-* headers belong to the first publish (its Nats-Msg-Id would make this one a duplicate).
      if (name.toLowerCase().startsWith('nats-')) continue;
      for (const v of values) h.append(name, v);
    }
    h.set(DeliveryHeader.Replay, String(n));
    const msgId = `${row.webhook_id}.${row.endpoint_id}.replay.${n}`;
    const ack = await js.publish(original.subject, Buffer.from(original.body_base64, 'base64'), { msgID: msgId, headers: h });
    const [updated] = await em.execute<Row[]>(
      `update dead_letters set status = 'replayed', replay_count = ?, last_replayed_at = now() where id = ? returning ${COLUMNS}`,
      [n, id],
    );
    return {
      dead_letter: toOut(updated!),
      replay: { stream: ack.stream, seq: ack.seq, subject: original.subject, msg_id: msgId, duplicate: ack.duplicate },
    };
  }

  async function replay(id: string, opts: { force: boolean }): Promise<DeadLetterReplayOut> {
    // The row lock makes two operators replaying the same record at once take turns; the second sees
    // status 'replayed' and is refused unless it forces.
    const out = await orm.em.fork().transactional((em) => replayLocked(em, id, opts.force));
    metrics.deadLettersReplayed.inc();
    log.info('dead letter replayed', {
      dead_letter: id, endpoint: out.dead_letter.endpoint_id, tenant: out.dead_letter.tenant,
      webhook_id: out.dead_letter.webhook_id, replay: out.dead_letter.replay_count,
    });
    return out;
  }

  return {
    async list(filter, page) {
      const w = where(filter);
      const after = page.cursor ? decodeCursor(page.cursor).after : undefined;
      const rows = await run<Row>(
        `select ${COLUMNS} from dead_letters where ${w.sql}${after ? ` and ${ID} < ?` : ''} order by ${ID} desc limit ?`,
        [...w.params, ...(after ? [after] : []), page.limit + 1],
      );
      const more = rows.length > page.limit;
      const data = rows.slice(0, page.limit).map(toOut);
      return { data, next_cursor: more ? encodeCursor({ after: data[data.length - 1]!.id }) : null };
    },

    async show(id) {
      const [row] = await run<Row & { sealed: Buffer }>(`select ${COLUMNS}, sealed from dead_letters where id = ?`, [id]);
      if (!row) throw notFound(`dead letter ${id}`);
      return { dead_letter: toOut(row), message: messageOut(opener, row.sealed) };
    },

    replay,

    async replayMany(filter, page) {
      const w = where(filter);
      const cursor = page.cursor ? decodeCursor(page.cursor) : undefined;
      // Oldest first. A record that dies again keeps its id, so the cursor has passed it: one run
      // replays each record at most once, however fast replays fail.
      const total = cursor?.total ?? Number((await run<{ n: string }>(`select count(*) as n from dead_letters where ${w.sql}`, w.params))[0]?.n ?? 0);
      const ids = await run<{ id: string }>(
        `select id from dead_letters where ${w.sql}${cursor ? ` and ${ID} > ?` : ''} order by ${ID} asc limit ?`,
        [...w.params, ...(cursor ? [cursor.after] : []), page.limit],
      );
      const out: DeadLettersReplayManyOut = { replayed: [], failed: [], total, next_cursor: null };
      for (const { id } of ids) {
        try {
          const r = await replay(id, { force: false });
          out.replayed.push({ id, endpoint_id: r.dead_letter.endpoint_id, webhook_id: r.dead_letter.webhook_id, replay_count: r.dead_letter.replay_count });
        } catch (e) {
          // One bad record (deleted endpoint, replayed meanwhile) must not stop the run; it is reported.
          const error = isHookstreamError(e) ? e : new HookstreamError(ErrorCode.Internal, describe(e));
          if (!isHookstreamError(e)) log.error('replay failed', { dead_letter: id, reason: describe(e) });
          out.failed.push({ id, error: { code: adminCode(error.code), message: error.message } });
        }
      }
      if (ids.length === page.limit) out.next_cursor = encodeCursor({ after: ids[ids.length - 1]!.id, total });
      return out;
    },
  };
}

/** The admin protocol's error code for a service error code. */
export function adminCode(code: ErrorCode): AdminErrorCode {
  switch (code) {
    case ErrorCode.BadRequest:
    case ErrorCode.ValidationFailed:
      return 'bad_request';
    case ErrorCode.NotFound:
      return 'not_found';
    case ErrorCode.Conflict:
      return 'conflict';
    default:
      return 'internal_error';
  }
}
