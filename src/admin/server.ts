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
import type { DeadLetterTagger } from '../deadletter/tag.ts';
import { createRejectedEvents } from './rejected-events.ts';
import { createOverview } from './overview.ts';
import { createDeliveryLog } from '../deliverylog/search.ts';
import { createEndpointActions, type EndpointCommands } from './endpoint-actions.ts';
import { requestRetryNow } from '../delivery/retry-now.ts';
import {
  ADMIN_QUEUE, ADMIN_SUBJECTS, adminCode, AdminErrorCode, AdminSubject, OPERATOR_HEADER, type AdminErrorReply, type AuditListOut,
  type DeadLetterReplayOut, type DeadLettersReplayManyOut, type EndpointRetryNowOut, type SubjectErasureOut, erasureSummary,
} from './protocol.ts';
import { createErasure } from '../erasure/erase.ts';
import type { DataKeys } from '../erasure/data-keys.ts';
import { SUBJECT_KINDS, type SubjectHasher } from '../erasure/subject-hash.ts';
import { AUDIT_OK, AuditAction, listAudit, recordAudit, UNNAMED_OPERATOR } from '../audit/store.ts';
import { isOperatorName, OPERATOR_NAME_RULE } from '../operators/store.ts';
import { iso } from '../deadletter/store.ts';
import {
  parseAuditListRequest, parseBody, parseEraseSubjectRequest, parseEmptyRequest, parseEndpointListRequest, parseDeliveryRequest, parseListRequest, parseRejectedListRequest, parseRejectedShowRequest, parseReplayManyRequest,
  parseReplayRequest, parseRetryNowRequest, parseShowRequest, parseDeliveryLogRequest, parseDeliveryAttemptsRequest, parseTraceRequest, parseVerdictRequest, parseEndpointRequest, parseEndpointActionRequest,
} from './requests.ts';

export interface Admin {
  /** Stop taking requests; requests being answered are finished first. */
  stop(): Promise<void>;
}

type Body = Record<string, unknown>;
type Handler = (body: Body) => Promise<unknown>;

/** What an audited operation records: its action, its target (from the request, once it parsed) and what it did. */
interface Audited {
  action: AuditAction;
  target: (b: Body) => string;
  detail?: (result: never, body: Body) => string;
}

const FILTER_FIELDS = ['tenant', 'endpoint', 'event', 'since', 'until'];

/** Issue 19: every operator action is audited where it is served, so the CLI and the console alike. */
const AUDITED: Partial<Record<string, Audited>> = {
  [AdminSubject.DeadLettersShow]: { action: AuditAction.DeadLetterShow, target: (b) => String(b['id']) },
  [AdminSubject.DeadLettersReplay]: {
    action: AuditAction.DeadLetterReplay, target: (b) => String(b['id']),
    detail: (r: DeadLetterReplayOut) => `replay ${r.dead_letter.replay_count} of ${r.dead_letter.webhook_id} to ${r.dead_letter.endpoint_id}`,
  },
  [AdminSubject.DeadLettersReplayMany]: {
    action: AuditAction.DeadLettersReplayMany,
    target: (b) => FILTER_FIELDS.filter((f) => typeof b[f] === 'string').map((f) => `${f}=${String(b[f])}`).join(' '),
    detail: (r: DeadLettersReplayManyOut, b) => (b['dry_run'] === true
      ? `dry run: ${r.total} matching`
      : `replayed ${r.replayed.length}, failed ${r.failed.length} (of ${r.total} matching)`),
  },
  [AdminSubject.EventsRejectedShow]: { action: AuditAction.RejectedEventShow, target: (b) => String(b['seq']) },
  // The subject's id is the target (the record an erasure was asked and done); the payloads never are.
  [AdminSubject.EraseSubject]: {
    action: AuditAction.EraseSubject,
    target: (b) => `${String(b['tenant'])} ${SUBJECT_KINDS.filter((k) => b[k] !== undefined).map((k) => `${k} ${String(b[k])}`).join(' ')}`,
    detail: (r: SubjectErasureOut) => erasureSummary(r),
  },
  [AdminSubject.EndpointsRetryNow]: {
    action: AuditAction.EndpointRetryNow, target: (b) => String(b['endpoint']),
    detail: (r: EndpointRetryNowOut) => `brought forward ${r.brought_forward} on ${r.instances} instance(s)`,
  },
  // Issue 31: the reason an operator gave is the record of why.
  [AdminSubject.EndpointsDisable]: { action: AuditAction.EndpointDisable, target: (b) => String(b['endpoint']), detail: (_r: unknown, b) => String(b['reason']) },
  [AdminSubject.EndpointsEnable]: { action: AuditAction.EndpointEnable, target: (b) => String(b['endpoint']) },
  [AdminSubject.EndpointsDelete]: { action: AuditAction.EndpointDelete, target: (b) => String(b['endpoint']), detail: (_r: unknown, b) => String(b['reason']) },
};

/** The operator a request names in its header; a request that names none is recorded as `unnamed`. */
function operatorOf(m: Msg): string {
  const name = m.headers?.get(OPERATOR_HEADER) ?? '';
  if (name === '') return UNNAMED_OPERATOR;
  if (!isOperatorName(name)) throw new HookstreamError(ErrorCode.BadRequest, `the ${OPERATOR_HEADER} header must be ${OPERATOR_NAME_RULE}`);
  return name;
}

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
  /** Checks each dead letter's authentication tag (keyed by the master key). */
  deadLetterTags: DeadLetterTagger;
  shards: number;
  /** HOOKSTREAM_EVENT_PARTITIONS: erasure reaches the events' partition copies. */
  partitions?: number;
  /** HOOKSTREAM_DIRECT_DELIVERY: backlogs and delivery states read the endpoints' consumers of the partition streams too. */
  direct?: boolean;
  /** Turns a webhook-id back into its EVENTS message (deliveries show). */
  webhookIds: WebhookIdCodec;
  /** Subject ids' keyed hashes (erasure, issue 22). */
  subjectHasher: SubjectHasher;
  /** Endpoint commands for operators' actions (issue 31); absent where the admin role may not write them. */
  endpointStore?: EndpointCommands | undefined;
  /** Delivery bodies' data keys: opened to show a dead letter, destroyed by erasure (src/erasure/data-keys.ts). */
  bodies?: DataKeys | undefined;
  log: Logger;
  metrics: ServiceMetrics;
}): Promise<Admin> {
  const { nc, log } = deps;
  const opener = await createDeadLetterOpener(deps.deadLetterTags, deps.deadLetterSecretKey, deps.previousDeadLetterSecretKey);
  const deadLetters = createDeadLetters({ ...deps, opener });
  const deliveries = createDeliveryStates(deps);
  const rejected = createRejectedEvents(deps);
  const overview = createOverview(deps);
  const deliveryLog = createDeliveryLog(deps);
  const endpointActions = createEndpointActions({ js: deps.js, jsm: deps.jsm, orm: deps.orm, store: deps.endpointStore });
  const erasure = createErasure({
    jsm: deps.jsm, orm: deps.orm, hasher: deps.subjectHasher, opener, log, shards: deps.shards, partitions: deps.partitions, shredding: deps.bodies && { keys: deps.bodies, nc },
  });

  const handlers: Record<string, Handler> = {
    [AdminSubject.DeadLettersList]: (b) => { const q = parseListRequest(b); return deadLetters.list(q.filter, q.page); },
    [AdminSubject.DeadLettersShow]: (b) => deadLetters.show(parseShowRequest(b).id),
    [AdminSubject.DeadLettersReplay]: (b) => { const q = parseReplayRequest(b); return deadLetters.replay(q.id, { force: q.force }); },
    [AdminSubject.DeadLettersReplayMany]: (b) => { const q = parseReplayManyRequest(b); return deadLetters.replayMany(q.filter, q.page, { dryRun: q.dryRun }); },
    [AdminSubject.DeliveriesShow]: (b) => { const q = parseDeliveryRequest(b); return deliveries.show(q.webhookId, q.endpoint); },
    [AdminSubject.DeliveriesList]: (b) => deliveryLog.list(parseDeliveryLogRequest(b)),
    [AdminSubject.DeliveriesAttempts]: (b) => { const q = parseDeliveryAttemptsRequest(b); return deliveryLog.attempts(q.webhookId, q.endpoint); },
    [AdminSubject.EventsTrace]: (b) => deliveryLog.trace(parseTraceRequest(b)),
    [AdminSubject.EventsVerdict]: (b) => { const q = parseVerdictRequest(b); return deliveryLog.verdict(q.tenant, q.seq); },
    [AdminSubject.EndpointsHealth]: (b) => overview.endpointHealth(parseEndpointRequest(b).endpoint),
    [AdminSubject.EndpointsDisable]: (b) => endpointActions.disable(parseEndpointActionRequest(b, 'required').endpoint),
    [AdminSubject.EndpointsEnable]: (b) => endpointActions.enable(parseEndpointActionRequest(b, 'none').endpoint),
    [AdminSubject.EndpointsDelete]: (b) => endpointActions.delete(parseEndpointActionRequest(b, 'required').endpoint),
    [AdminSubject.EventsRejected]: (b) => rejected.list(parseRejectedListRequest(b)),
    [AdminSubject.EventsRejectedShow]: (b) => rejected.show(parseRejectedShowRequest(b).seq),
    [AdminSubject.EndpointsRetryNow]: async (b) => {
      const { endpoint } = parseRetryNowRequest(b);
      const r = await requestRetryNow(nc, endpoint);
      log.info('retry-now', { endpoint, brought_forward: r.broughtForward, instances: r.instances });
      return { endpoint_id: endpoint, brought_forward: r.broughtForward, instances: r.instances };
    },
    [AdminSubject.EndpointsList]: (b) => overview.listEndpoints(parseEndpointListRequest(b)),
    [AdminSubject.Overview]: (b) => { parseEmptyRequest(b); return overview.overview(); },
    [AdminSubject.EraseSubject]: (b) => { const q = parseEraseSubjectRequest(b); return erasure.eraseSubject(q.tenant, q.subject); },
    [AdminSubject.AuditList]: async (b): Promise<AuditListOut> => {
      const q = parseAuditListRequest(b);
      const rows = await listAudit(deps.orm.em.fork(), q.filter, { ...q.page, limit: q.page.limit + 1 });
      const data = rows.slice(0, q.page.limit).map((r) => ({ ...r, at: iso(r.at) }));
      return { data, next_cursor: rows.length > q.page.limit ? data[data.length - 1]!.id : null };
    },
  };

  /** Runs an audited operation and writes its record before the answer goes out: no answer without one. */
  async function audited(a: Audited, operator: string, handler: Handler, body: Body): Promise<unknown> {
    let result: unknown;
    let outcome: string = AUDIT_OK;
    try {
      result = await handler(body);
    } catch (e) {
      const code = isHookstreamError(e) ? adminCode(e.code) : AdminErrorCode.Internal;
      // A request that did not parse names no target: nothing was done to anything.
      if (code === AdminErrorCode.BadRequest) throw e;
      outcome = code;
      await write(null);
      throw e;
    }
    await write(a.detail ? a.detail(result as never, body) : null);
    return result;

    async function write(detail: string | null): Promise<void> {
      try {
        await recordAudit(deps.orm.em.fork(), { operator, action: a.action, target: a.target(body), outcome, detail });
      } catch (e) {
        log.error('could not write the audit log', { action: a.action, operator, reason: describe(e) });
        throw new HookstreamError(ErrorCode.Internal, `${a.action} ${outcome === AUDIT_OK ? 'was done' : 'failed'}, but the audit log could not be written (${describe(e)})`);
      }
    }
  }

  async function answer(m: Msg): Promise<unknown> {
    const handler = handlers[m.subject];
    if (!handler) {
      throw new HookstreamError(ErrorCode.NotFound, `unknown admin operation ${m.subject}; operations: ${Object.keys(handlers).join(', ')}`);
    }
    const operator = operatorOf(m);
    const body = parseBody(m.data);
    const a = AUDITED[m.subject];
    return a ? audited(a, operator, handler, body) : handler(body);
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
