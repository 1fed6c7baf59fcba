// Dead letters for operators: list (filtered, keyset-paged on the time-ordered id), show (opened), and
// replay. A replay re-publishes the original message to its work-queue subject with its original
// webhook-id and a fresh Nats-Msg-Id (`<webhookId>.<endpoint>.replay.<n>`): receivers that deduplicate by
// webhook-id stay correct, and JetStream's duplicate window makes a retried replay of the same n a no-op.
// If the replay fails again it runs the retry schedule and the dead-letter handler's upsert marks the
// record dead again (dead_count + 1).
//
// A replay publishes only the delivery its row names (issue 23): the dead-letter public key is public by
// design, so anyone who can write the table can seal a message. A row whose authentication tag (a key
// derived from the master key, which the database does not hold) does not vouch for its message under its
// identity is refused and logged, as is a row stored before tags; the subject is built from the row's
// endpoint, the headers from an allow-list, and a sealed message that names another endpoint, tenant,
// webhook-id, event or subject than its row is refused too.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { deliveryAddress, DeliveryHeader } from '../../streams/deliveries.ts';
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
import { originalHeader, recordMismatch, type OriginalMessage } from '../deadletter/sealed-message.ts';
import {
  adminCode, deadLetterOut, type DeadLetterReplayOut, type DeadLetterShowOut, type DeadLettersListOut, type DeadLettersReplayManyOut,
  type OriginalMessageOut,
} from './protocol.ts';
import type { Page } from './requests.ts';
import { Attr, startPublish, tracing } from '../telemetry/tracing.ts';
import { isDataKeyErased, type DataKeys } from '../erasure/data-keys.ts';

/** Opened original message, body parsed (it is the JSON body that was POSTed); a sealed body opened first. */
async function messageOut(original: OriginalMessage, bodies: Pick<DataKeys, 'open'> | undefined): Promise<OriginalMessageOut> {
  const raw = Buffer.from(original.body_base64, 'base64');
  const plain = bodies ? await Promise.resolve().then(() => bodies.open(raw)).catch((e: unknown) => {
    if (isDataKeyErased(e)) return undefined;
    throw e;
  }) : raw;
  if (plain === undefined) return { subject: original.subject, headers: original.headers, body: '(erased: the data key of this body was destroyed)' };
  const text = Buffer.from(plain).toString('utf8');
  let body: unknown;
  try { body = JSON.parse(text); } catch { body = text; }
  return { subject: original.subject, headers: original.headers, body };
}

/** The headers a replay carries over from the sealed message; the router set them, nothing else may. */
const REPLAYED_HEADERS = [
  DeliveryHeader.WebhookId, DeliveryHeader.Event, DeliveryHeader.Tenant, DeliveryHeader.Endpoint,
  DeliveryHeader.EndpointVersion, DeliveryHeader.EventSeq,
] as const;

export interface DeadLetters {
  list(filter: DeadLetterFilter, page: Page): Promise<DeadLettersListOut>;
  show(id: DeadLetterId): Promise<DeadLetterShowOut>;
  replay(id: DeadLetterId, opts: { force: boolean }): Promise<DeadLetterReplayOut>;
  /** With dryRun, only counts what would be replayed (total) and replays nothing. */
  replayMany(filter: DeadLetterFilter, page: Page, opts?: { dryRun: boolean }): Promise<DeadLettersReplayManyOut>;
}

export function createDeadLetters(deps: {
  orm: MikroORM;
  js: JetStreamClient;
  jsm: JetStreamManager;
  opener: DeadLetterOpener;
  /** Delivery shards: a replay's subject is its endpoint's. */
  shards: number;
  log: Logger;
  metrics: ServiceMetrics;
  /** Opens sealed bodies for show (a replay publishes the body as it was queued, sealed). */
  bodies?: Pick<DataKeys, 'open'> | undefined;
}): DeadLetters {
  const { orm, js, jsm, opener, log, metrics } = deps;
  async function replayLocked(em: EntityManager, id: DeadLetterId, force: boolean): Promise<DeadLetterReplayOut> {
    const row = await findDeadLetter(em, id, { forUpdate: true });
    if (!row) throw notFound(`dead letter ${id}`);
    if (row.status === DeadLetterStatus.Replayed && !force) {
      throw conflict(`dead letter ${id} was already replayed (${row.replay_count}x, last at ${row.last_replayed_at ? iso(row.last_replayed_at) : '?'}); `
        + 'its delivery may still be running: see deliveries show, or pass force to replay again');
    }
    const { message: original, tag } = opener.open(row);
    if (tag === 'missing') {
      log.warn('dead letter refused: it carries no authentication tag', { dead_letter: id, endpoint: row.endpoint_id });
      throw conflict(`dead letter ${id} was not replayed: it was stored before dead letters carried an authentication tag; `
        + 'check it (dead-letters show) and run `hookstream keys reseal-dead-letters` to tag it; nothing was published');
    }
    const { subject } = deliveryAddress(row.endpoint_id, deps.shards);
    // A deleted endpoint has no consumer: the message would sit in its work queue forever.
    const endpoint = await readEndpoint(js, jsm, row.endpoint_id as EndpointId);
    const problem = (tag === 'invalid' ? 'its authentication tag does not match its row and message' : undefined)
      ?? recordMismatch(row, original, deps.shards)
      ?? (endpoint && endpoint.tenant !== row.tenant ? 'its endpoint belongs to another tenant' : undefined);
    if (problem) {
      log.warn('dead letter refused: its sealed message is not the delivery its record names', { dead_letter: id, endpoint: row.endpoint_id, reason: problem });
      throw conflict(`dead letter ${id} was not replayed: ${problem} (a forged or altered record); nothing was published`);
    }
    if (!endpoint || endpoint.status !== EndpointStatus.Active) {
      throw conflict(`endpoint ${row.endpoint_id} is ${endpoint ? endpoint.status : 'gone'}; restore it before replaying`);
    }
    const n = row.replay_count + 1;
    const h = natsHeaders();
    for (const name of REPLAYED_HEADERS) {
      const v = originalHeader(original, name);
      if (v !== undefined) h.set(name, v);
    }
    h.set(DeliveryHeader.Replay, String(n));
    const msgId = `${row.webhook_id}.${row.endpoint_id}.replay.${n}`;
    // Traced: a new trace, linked to the original delivery's (its sealed message kept the traceparent).
    const traced = tracing.on ? startPublish('replay dead_letter', {
      [Attr.DeadLetter]: id, [Attr.Endpoint]: row.endpoint_id, [Attr.WebhookId]: row.webhook_id, [Attr.Replay]: n,
    }, originalHeader(original, 'traceparent')) : undefined;
    traced?.carry(h);
    const ack = await js.publish(subject, Buffer.from(original.body_base64, 'base64'), { msgID: msgId, headers: h })
      .finally(() => traced?.end());
    const updated = await markReplayed(em, id, n, [ack.stream, ack.seq]);
    return {
      dead_letter: deadLetterOut(updated),
      replay: { stream: ack.stream, seq: ack.seq, subject, msg_id: msgId, duplicate: ack.duplicate },
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
      const { message, tag } = opener.open(row);
      return { dead_letter: deadLetterOut(row), message: await messageOut(message, deps.bodies), tag };
    },

    replay,

    async replayMany(filter, page, opts) {
      const cursor = page.cursor ? decodeCursor(page.cursor) : undefined;
      // Oldest first. A record that dies again keeps its id, so the cursor has passed it: one run
      // replays each record at most once, however fast replays fail.
      const total = cursor?.total ?? await countDeadLetters(orm.em.fork(), filter);
      if (opts?.dryRun) return { replayed: [], failed: [], total, next_cursor: null };
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
