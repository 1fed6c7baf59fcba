// A typed client of the admin subject (the CLI and tests use it): one request, one JSON reply, and an
// error reply turned into an AdminRequestError carrying the reply's code. Its caller says where NATS is:
// nothing here reads configuration.
import type { NatsConnection } from '@nats-io/nats-core';
import { headers as natsHeaders, NoRespondersError, PermissionViolationError, TimeoutError } from '@nats-io/nats-core';
import { connect } from '@nats-io/transport-node';
import { redactUrl } from '../config.ts';
import { describe, ErrorCode, HookstreamError, UnreachableError } from '../errors.ts';
import {
  AdminSubject, isAdminErrorReply, OPERATOR_HEADER, type AuditListIn, type AuditListOut, type EndpointListIn, type EndpointListOut, type OverviewOut, type DeadLetterReplayIn, type DeadLetterReplayOut, type DeadLetterShowIn,
  type DeadLetterShowOut, type DeadLettersListIn, type DeadLettersListOut, type DeadLettersReplayManyIn,
  type DeadLettersReplayManyOut, type DeliveryShowIn, type DeliveryShowOut, type EndpointRetryNowIn, type EndpointRetryNowOut, type RejectedEventShowIn, type RejectedEventShowOut,
  type RejectedEventsListIn, type RejectedEventsListOut, ERASURE_ROUTING_WAIT_MS, type EraseSubjectIn, type SubjectErasureOut,
  type DeliveriesListIn, type DeliveriesListOut, type EndpointHealthIn, type EndpointHealthOut, type EndpointActionIn, type EndpointActionOut, type DeliveryAttemptsIn, type DeliveryAttemptsOut, type EventsTraceIn, type EventsTraceOut, type EventVerdictIn, type EventVerdictOut,
} from './protocol.ts';

/**
 * The admin role answered with an error reply (code as in the reply), or nobody could answer
 * (`unreachable`). A HookstreamError, so the CLI prints it as one line and exits 1.
 */
export class AdminRequestError extends HookstreamError {
  constructor(code: ErrorCode, message: string) {
    super(code, message);
    this.name = 'AdminRequestError';
  }
}

/**
 * Operators' inbox prefix. Replies carry opened dead letters; the OPERATORS account of nats.conf is what
 * keeps them from producers, and operators may use plain `_INBOX` too. Kept so existing grants still fit.
 */
export const OPERATOR_INBOX_PREFIX = '_INBOX_operator';

export interface AdminClient {
  listDeadLetters(req: DeadLettersListIn): Promise<DeadLettersListOut>;
  showDeadLetter(req: DeadLetterShowIn): Promise<DeadLetterShowOut>;
  replayDeadLetter(req: DeadLetterReplayIn): Promise<DeadLetterReplayOut>;
  replayDeadLetters(req: DeadLettersReplayManyIn): Promise<DeadLettersReplayManyOut>;
  showDelivery(req: DeliveryShowIn): Promise<DeliveryShowOut>;
  listRejectedEvents(req: RejectedEventsListIn): Promise<RejectedEventsListOut>;
  showRejectedEvent(req: RejectedEventShowIn): Promise<RejectedEventShowOut>;
  retryNow(req: EndpointRetryNowIn): Promise<EndpointRetryNowOut>;
  listAudit(req: AuditListIn): Promise<AuditListOut>;
  listEndpoints(req: EndpointListIn): Promise<EndpointListOut>;
  overview(): Promise<OverviewOut>;
  eraseSubject(req: EraseSubjectIn): Promise<SubjectErasureOut>;
  listDeliveries(req: DeliveriesListIn): Promise<DeliveriesListOut>;
  deliveryAttempts(req: DeliveryAttemptsIn): Promise<DeliveryAttemptsOut>;
  traceEvents(req: EventsTraceIn): Promise<EventsTraceOut>;
  eventVerdict(req: EventVerdictIn): Promise<EventVerdictOut>;
  endpointHealth(req: EndpointHealthIn): Promise<EndpointHealthOut>;
  disableEndpoint(req: Required<EndpointActionIn>): Promise<EndpointActionOut>;
  enableEndpoint(req: EndpointActionIn): Promise<EndpointActionOut>;
  deleteEndpoint(req: Required<EndpointActionIn>): Promise<EndpointActionOut>;
  /** Any admin subject with a raw payload (for tests of malformed requests). */
  raw(subject: string, payload: string | Uint8Array): Promise<unknown>;
}

export function createAdminClient(nc: NatsConnection, opts: { timeoutMs?: number; operator?: string | undefined } = {}): AdminClient {
  const timeout = opts.timeoutMs ?? 30_000;
  // The audit log's name for whoever asks (src/admin/server.ts); none: the admin role records `unnamed`.
  const headers = opts.operator ? natsHeaders() : undefined;
  if (opts.operator) headers!.set(OPERATOR_HEADER, opts.operator);

  async function raw(subject: string, payload: string | Uint8Array, wait = timeout): Promise<unknown> {
    let reply;
    try {
      reply = await nc.request(subject, payload, headers ? { timeout: wait, headers } : { timeout: wait });
    } catch (e) {
      if (e instanceof NoRespondersError || (e instanceof Error && e.cause instanceof NoRespondersError)) {
        throw new AdminRequestError(ErrorCode.Unreachable, 'no hookstream process answers admin requests: run one with the admin role (hookstream serve --roles admin,…)');
      }
      if (e instanceof TimeoutError || (e instanceof Error && e.cause instanceof TimeoutError)) {
        throw new AdminRequestError(ErrorCode.Unreachable, `no answer to ${subject} within ${wait} ms`);
      }
      if (e instanceof PermissionViolationError || (e instanceof Error && e.cause instanceof PermissionViolationError)) {
        throw new AdminRequestError(ErrorCode.Unreachable, `this NATS user may not use ${subject} (see nats.conf: the operator user may)`);
      }
      throw e;
    }
    try {
      return reply.json<unknown>();
    } catch {
      throw new AdminRequestError(ErrorCode.Internal, `the answer to ${subject} is not JSON`);
    }
  }

  async function call<T>(subject: string, body: object, wait?: number): Promise<T> {
    const out = await raw(subject, JSON.stringify(body), wait);
    if (isAdminErrorReply(out)) throw new AdminRequestError(out.error.code, out.error.message);
    return out as T;
  }

  return {
    listDeadLetters: (req) => call(AdminSubject.DeadLettersList, req),
    showDeadLetter: (req) => call(AdminSubject.DeadLettersShow, req),
    replayDeadLetter: (req) => call(AdminSubject.DeadLettersReplay, req),
    replayDeadLetters: (req) => call(AdminSubject.DeadLettersReplayMany, req),
    showDelivery: (req) => call(AdminSubject.DeliveriesShow, req),
    listRejectedEvents: (req) => call(AdminSubject.EventsRejected, req),
    showRejectedEvent: (req) => call(AdminSubject.EventsRejectedShow, req),
    retryNow: (req) => call(AdminSubject.EndpointsRetryNow, req),
    listAudit: (req) => call(AdminSubject.AuditList, req),
    listEndpoints: (req) => call(AdminSubject.EndpointsList, req),
    overview: () => call(AdminSubject.Overview, {}),
    // Erasure may wait for the router (DEFAULT_ROUTING_WAIT_MS) before it reads the index: a longer wait.
    eraseSubject: (req) => call(AdminSubject.EraseSubject, req, Math.max(timeout, 4 * ERASURE_ROUTING_WAIT_MS)),
    listDeliveries: (req) => call(AdminSubject.DeliveriesList, req),
    deliveryAttempts: (req) => call(AdminSubject.DeliveriesAttempts, req),
    traceEvents: (req) => call(AdminSubject.EventsTrace, req),
    eventVerdict: (req) => call(AdminSubject.EventsVerdict, req),
    endpointHealth: (req) => call(AdminSubject.EndpointsHealth, req),
    disableEndpoint: (req) => call(AdminSubject.EndpointsDisable, req),
    enableEndpoint: (req) => call(AdminSubject.EndpointsEnable, req),
    deleteEndpoint: (req) => call(AdminSubject.EndpointsDelete, req),
    raw: (subject, payload) => raw(subject, payload),
  };
}

export interface OperatorConnectOptions {
  /** NATS server(s), comma-separated. */
  url: string;
  /** The operator user of nats.conf, if the server asks for one. */
  user?: string | undefined;
  password?: string | undefined;
  timeoutMs?: number;
  /** Recorded in the audit log as who asked. */
  operator?: string | undefined;
}

/** An operator's connection: the given credentials, replies on the operator inbox. */
export async function connectAsOperator(opts: OperatorConnectOptions): Promise<NatsConnection> {
  const servers = opts.url.split(',').map((s) => s.trim());
  try {
    return await connect({
      servers,
      name: 'hookstream-cli',
      inboxPrefix: OPERATOR_INBOX_PREFIX,
      timeout: opts.timeoutMs ?? 5000,
      ...(opts.user ? { user: opts.user, pass: opts.password ?? '' } : {}),
    });
  } catch (e) {
    throw new UnreachableError(`cannot connect to NATS at ${servers.map(redactUrl).join(',')} (${describe(e)})`, e);
  }
}

/** Run `fn` with an admin client on an operator connection, closed afterwards. */
export async function withAdminClient<T>(opts: OperatorConnectOptions & { timeoutMs?: number }, fn: (admin: AdminClient) => Promise<T>): Promise<T> {
  const nc = await connectAsOperator(opts);
  try {
    return await fn(createAdminClient(nc, { operator: opts.operator, ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}) }));
  } finally {
    await nc.drain().catch(() => {});
  }
}
