// The admin role: answers request/reply on `admin.>` in a queue group (any number of instances share the
// subjects). Every request gets exactly one JSON reply, a result or `{error: {code, message}}`: malformed
// JSON, unknown operations, bad filters and unknown ids are answered, never dropped, and a handler that
// throws something unexpected is logged and answered as internal_error without taking the process down.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { Msg, NatsConnection, Subscription } from '@nats-io/nats-core';
import { describe, ErrorCode, HookstreamError, isHookstreamError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import type { WebhookIdCodec } from '../domain/webhook-id.ts';
import { createDeadLetters } from './dead-letters.ts';
import { createDeliveryStates } from './delivery-state.ts';
import { createDeadLetterOpener } from './opener.ts';
import { createRejectedEvents } from './rejected-events.ts';
import { requestRetryNow } from '../delivery/retry-now.ts';
import { ADMIN_QUEUE, ADMIN_SUBJECTS, adminCode, AdminErrorCode, AdminSubject, type AdminErrorReply } from './protocol.ts';
import {
  parseBody, parseDeliveryRequest, parseListRequest, parseRejectedListRequest, parseRejectedShowRequest, parseReplayManyRequest,
  parseReplayRequest, parseRetryNowRequest, parseShowRequest,
} from './requests.ts';

export interface Admin {
  /** Stop taking requests; requests being answered are finished first. */
  stop(): Promise<void>;
}

type Handler = (body: Record<string, unknown>) => Promise<unknown>;

/**
 * Reply subjects the admin role answers: `_R_.…` (the server's one-shot reply of a request that came
 * through an account import, routed back to the requester's account) and `_INBOX….` inboxes.
 */
const INBOX_REPLY = /^(?:_R_\.|_INBOX[A-Za-z0-9_-]*\.)/;
export const isInboxReply = (reply: string): boolean => INBOX_REPLY.test(reply);

export async function startAdmin(deps: {
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  orm: MikroORM;
  deadLetterSecretKey: string;
  /** During a key-pair rotation: opens the dead letters sealed before it. */
  previousDeadLetterSecretKey?: string | undefined;
  shards: number;
  /** Turns a webhook-id back into its EVENTS message (deliveries show). */
  webhookIds: WebhookIdCodec;
  log: Logger;
  metrics: ServiceMetrics;
}): Promise<Admin> {
  const { nc, log } = deps;
  const opener = await createDeadLetterOpener(deps.deadLetterSecretKey, deps.previousDeadLetterSecretKey);
  const deadLetters = createDeadLetters({ ...deps, opener });
  const deliveries = createDeliveryStates(deps);
  const rejected = createRejectedEvents(deps);

  const handlers: Record<string, Handler> = {
    [AdminSubject.DeadLettersList]: (b) => { const q = parseListRequest(b); return deadLetters.list(q.filter, q.page); },
    [AdminSubject.DeadLettersShow]: (b) => deadLetters.show(parseShowRequest(b).id),
    [AdminSubject.DeadLettersReplay]: (b) => { const q = parseReplayRequest(b); return deadLetters.replay(q.id, { force: q.force }); },
    [AdminSubject.DeadLettersReplayMany]: (b) => { const q = parseReplayManyRequest(b); return deadLetters.replayMany(q.filter, q.page); },
    [AdminSubject.DeliveriesShow]: (b) => { const q = parseDeliveryRequest(b); return deliveries.show(q.webhookId, q.endpoint); },
    [AdminSubject.EventsRejected]: (b) => rejected.list(parseRejectedListRequest(b)),
    [AdminSubject.EventsRejectedShow]: (b) => rejected.show(parseRejectedShowRequest(b).seq),
    [AdminSubject.EndpointsRetryNow]: async (b) => {
      const { endpoint } = parseRetryNowRequest(b);
      const r = await requestRetryNow(nc, endpoint);
      log.info('retry-now', { endpoint, brought_forward: r.broughtForward, instances: r.instances });
      return { endpoint_id: endpoint, brought_forward: r.broughtForward, instances: r.instances };
    },
  };

  async function answer(m: Msg): Promise<unknown> {
    const handler = handlers[m.subject];
    if (!handler) {
      throw new HookstreamError(ErrorCode.NotFound, `unknown admin operation ${m.subject}; operations: ${Object.keys(handlers).join(', ')}`);
    }
    return handler(parseBody(m.data));
  }

  const errorReply = (m: Msg, e: unknown): AdminErrorReply => {
    if (isHookstreamError(e)) return { error: { code: adminCode(e.code), message: e.message } };
    log.error('admin request failed', { subject: m.subject, reason: describe(e) });
    return { error: { code: AdminErrorCode.Internal, message: `internal error: ${describe(e)}` } };
  };

  const inFlight = new Set<Promise<void>>();
  const handle = (m: Msg): Promise<void> => answer(m).then(
    (result) => { reply(m, result); },
    (e: unknown) => {
      const r = errorReply(m, e);
      log.info('admin request refused', { subject: m.subject, code: r.error.code, reason: r.error.message });
      reply(m, r);
    },
  );

  function reply(m: Msg, value: unknown): void {
    if (!m.reply) return; // a publish, not a request: nobody to answer
    try {
      m.respond(JSON.stringify(value));
    } catch (e) {
      log.warn('could not send admin reply', { subject: m.subject, reason: describe(e) });
    }
  }

  const sub: Subscription = nc.subscribe(ADMIN_SUBJECTS, {
    queue: ADMIN_QUEUE,
    callback: (err, m) => {
      if (err) {
        log.error('admin subscription failed', { reason: describe(err) });
        return;
      }
      if (m.reply && !isInboxReply(m.reply)) {
        // Answering would publish as the service to a subject the requester chose ($JS.API.…, events.…).
        log.warn('admin request refused: reply subject is not an inbox', { subject: m.subject, reply: m.reply, reason: 'reply_not_inbox' });
        deps.metrics.adminRefused.inc({ reason: 'reply_not_inbox' });
        return;
      }
      const p = handle(m).catch((e: unknown) => log.error('admin reply crashed', { subject: m.subject, reason: describe(e) }));
      inFlight.add(p);
      void p.finally(() => inFlight.delete(p));
    },
  });
  // The subscription is registered with the server before the role counts as started.
  await nc.flush();
  log.info('admin started', { subjects: ADMIN_SUBJECTS, queue: ADMIN_QUEUE });

  return {
    async stop() {
      await sub.drain().catch(() => {});
      await Promise.allSettled([...inFlight]);
    },
  };
}
