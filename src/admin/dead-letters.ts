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
import {
  countDeadLetters, deadLetterIds, DeadLetterStatus, findDeadLetter, iso, listDeadLetters, markReplayed, type DeadLetterFilter, type DeadLetterId,
} from '../deadletter/store.ts';
import { conflict, describe, ErrorCode, HookstreamError, isHookstreamError, notFound } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { decodeCursor, encodeCursor } from './cursor.ts';
import type { DeadLetterOpener } from './opener.ts';
import {
  adminCode, deadLetterOut, type DeadLetterReplayOut, type DeadLetterShowOut, type DeadLettersListOut, type DeadLettersReplayManyOut,
  type OriginalMessageOut,
} from './protocol.ts';
import type { Page } from './requests.ts';

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
  show(id: DeadLetterId): Promise<DeadLetterShowOut>;
  replay(id: DeadLetterId, opts: { force: boolean }): Promise<DeadLetterReplayOut>;
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
  async function replayLocked(em: EntityManager, id: DeadLetterId, force: boolean): Promise<DeadLetterReplayOut> {
    const row = await findDeadLetter(em, id, { forUpdate: true });
    if (!row) throw notFound(`dead letter ${id}`);
    if (row.status === DeadLetterStatus.Replayed && !force) {
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
    const updated = await markReplayed(em, id, n);
    return {
      dead_letter: deadLetterOut(updated),
      replay: { stream: ack.stream, seq: ack.seq, subject: original.subject, msg_id: msgId, duplicate: ack.duplicate },
    };
  }

  async function replay(id: DeadLetterId, opts: { force: boolean }): Promise<DeadLetterReplayOut> {
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
      const before = page.cursor ? decodeCursor(page.cursor).after : undefined;
      const rows = await listDeadLetters(orm.em.fork(), filter, { ...(before ? { before } : {}), limit: page.limit + 1 });
      const more = rows.length > page.limit;
      const data = rows.slice(0, page.limit);
      return { data: data.map(deadLetterOut), next_cursor: more ? encodeCursor({ after: data[data.length - 1]!.id }) : null };
    },

    async show(id) {
      const row = await findDeadLetter(orm.em.fork(), id);
      if (!row) throw notFound(`dead letter ${id}`);
      return { dead_letter: deadLetterOut(row), message: messageOut(opener, row.sealed) };
    },

    replay,

    async replayMany(filter, page) {
      const cursor = page.cursor ? decodeCursor(page.cursor) : undefined;
      // Oldest first. A record that dies again keeps its id, so the cursor has passed it: one run
      // replays each record at most once, however fast replays fail.
      const total = cursor?.total ?? await countDeadLetters(orm.em.fork(), filter);
      const ids = await deadLetterIds(orm.em.fork(), filter, { ...(cursor ? { after: cursor.after } : {}), limit: page.limit });
      const out: DeadLettersReplayManyOut = { replayed: [], failed: [], total, next_cursor: null };
      for (const id of ids) {
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
      if (ids.length === page.limit) out.next_cursor = encodeCursor({ after: ids[ids.length - 1]!, total });
      return out;
    },
  };
}
