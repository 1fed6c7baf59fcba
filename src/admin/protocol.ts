// The admin subject's wire contract: NATS request/reply under `admin.`, JSON in, JSON out (snake_case).
// Shared by the admin role that answers and the CLI that asks; nothing here touches NATS or Postgres.
import type { AttemptRecord } from '../../streams/attempts.ts';
import { ErrorCode } from '../errors.ts';
import { iso, type DeadLetterRow, type DeadLetterStatus } from '../deadletter/store.ts';
import type { TagCheck } from '../deadletter/tag.ts';

export const ADMIN_SUBJECTS = 'admin.>';
/** Every instance running the admin role joins this queue group, so each request is answered once. */
export const ADMIN_QUEUE = 'hookstream-admin';
/**
 * Who asks (issue 19): the operator's name, recorded in the audit log with every audited action. The CLI
 * sends its --operator / HOOKSTREAM_OPERATOR, the console the signed-in operator's name.
 */
export const OPERATOR_HEADER = 'Hookstream-Operator';

export const AdminSubject = {
  DeadLettersList: 'admin.dead_letters.list',
  DeadLettersShow: 'admin.dead_letters.show',
  DeadLettersReplay: 'admin.dead_letters.replay',
  DeadLettersReplayMany: 'admin.dead_letters.replay_many',
  DeliveriesShow: 'admin.deliveries.show',
  EventsRejected: 'admin.events.rejected',
  EventsRejectedShow: 'admin.events.rejected.show',
  EndpointsRetryNow: 'admin.endpoints.retry_now',
  AuditList: 'admin.audit.list',
  EndpointsList: 'admin.endpoints.list',
  Overview: 'admin.overview',
  EraseSubject: 'admin.erasure.subject',
  DeliveriesList: 'admin.deliveries.list',
  DeliveriesAttempts: 'admin.deliveries.attempts',
  EventsTrace: 'admin.events.trace',
  EventsVerdict: 'admin.events.verdict',
  EndpointsHealth: 'admin.endpoints.health',
  EndpointsDisable: 'admin.endpoints.disable',
  EndpointsEnable: 'admin.endpoints.enable',
  EndpointsDelete: 'admin.endpoints.delete',
} as const;
export type AdminSubject = (typeof AdminSubject)[keyof typeof AdminSubject];

/** The codes of admin error replies: those of the service's codes an operator acts on (adminCode maps the rest). */
export const AdminErrorCode = {
  BadRequest: ErrorCode.BadRequest,
  NotFound: ErrorCode.NotFound,
  Conflict: ErrorCode.Conflict,
  Internal: ErrorCode.Internal,
} as const;
export type AdminErrorCode = (typeof AdminErrorCode)[keyof typeof AdminErrorCode];

export interface AdminErrorReply {
  error: { code: AdminErrorCode; message: string };
}

// ---- requests ----

export interface DeadLetterFilterIn {
  tenant?: string;
  endpoint?: string;
  event?: string;
  /** ISO 8601; on failed_at (when the delivery died), inclusive. */
  since?: string;
  /** ISO 8601; on failed_at, exclusive. */
  until?: string;
  status?: DeadLetterStatus;
}

export interface DeadLettersListIn extends DeadLetterFilterIn {
  /** Only the dead letters of this webhook-id (msg_…). */
  webhook_id?: string;
  limit?: number;
  cursor?: string;
}

export interface DeadLetterShowIn {
  id: string;
}

export interface DeadLetterReplayIn {
  id: string;
  /** Replay a record that was already replayed (its last replay may still be in flight). */
  force?: boolean;
}

/** Replays the `dead` records matching the filter (at least one criterion), a batch per request. */
export interface DeadLettersReplayManyIn extends Omit<DeadLetterFilterIn, 'status'> {
  limit?: number;
  cursor?: string;
  /** Only count the matching dead records (`total`); replay nothing. */
  dry_run?: boolean;
}

export interface DeliveryShowIn {
  webhook_id: string;
  endpoint: string;
}

/** Bring an endpoint's waiting retries forward (after its receiver was fixed). */
export interface EndpointRetryNowIn {
  endpoint: string;
}

/** Erase one data subject's payloads of a tenant (issue 22): exactly one of user, organization, key. */
export interface EraseSubjectIn {
  tenant: string;
  user?: string;
  organization?: string;
  /** An ordering key (Hookstream-Ordering-Key, issue 21). */
  key?: string;
}

/** Rejected events, newest first. */
export interface RejectedEventsListIn {
  tenant?: string;
  limit?: number;
  cursor?: string;
}

export interface RejectedEventShowIn {
  /** The record's `seq` in REJECTED, as listed. */
  seq: number;
}

/** The audit log, newest first. */
export interface AuditListIn {
  operator?: string;
  action?: string;
  target?: string;
  limit?: number;
  cursor?: string;
}

/** Endpoints of every tenant, newest first (the console's Endpoints page). */
export interface EndpointListIn {
  tenant?: string;
  status?: string;
  limit?: number;
  cursor?: string;
}

// ---- replies ----

/** How long erasure waits for the router to route what was published before it started. */
export const ERASURE_ROUTING_WAIT_MS = 30_000;

export interface SubjectErasureOut {
  tenant: string;
  /** `key`: an ordering key (issue 21); it also finds the events whose user or organization id it is. */
  subject: { kind: 'user' | 'organization' | 'key'; id: string };
  /** EVENTS' last sequence when erasure started: events after it are not touched. */
  events_up_to_seq: number;
  stores: {
    /**
     * The subject's keys in DATA_KEYS, destroyed first and again at the end: every delivery body sealed
     * under them (acknowledged copies, replicas, dead letters) can no longer be opened. 0 when none existed.
     */
    data_keys: { destroyed: number };
    /** Routed events' copies in EVENTS (7 days, plaintext). */
    events: { erased: number };
    /** Events the router had not routed yet (the tail of EVENTS past its ack floor). */
    unrouted_events: { scanned: number; erased: number };
    /** Queued deliveries: erased ones are never delivered; already_gone were delivered (or dead, or dropped) before. */
    deliveries: { erased: number; already_gone: number };
    /** Failed-attempt records of the erased deliveries. */
    attempts: { erased: number };
    dead_letters: { erased: number };
    /** Replays of the erased dead letters still queued or waiting for a retry: erased ones are never delivered. */
    replays: { erased: number };
    /** The tenant's rejected events (7 days), and with them their EVENTS copies (counted under events). */
    rejected: { scanned: number; erased: number };
    /**
     * The subject's index entries (one per event), and the rows removed once what they point to is erased;
     * unapplied_scanned: index messages read past the index projection's checkpoint (it had not applied them).
     */
    index: { entries: number; erased: number; unapplied_scanned: number };
    /** The erased events' copies in their tenant's partition stream (HOOKSTREAM_EVENT_PARTITIONS; 0 without). */
    partition_copies: { erased: number };
  };
  /**
   * False when the router had not routed everything published before erasure started within the wait
   * (what it routes afterwards is indexed but not erased), or nats-server had not copied the tenant's
   * events into its partition stream (a copy made afterwards is not erased). Run erasure again.
   */
  routing_caught_up: boolean;
}

/** One line for the audit log and the CLI: counts per store, never an id or a payload. */
export function erasureSummary(r: SubjectErasureOut): string {
  const s = r.stores;
  return [
    `data keys ${s.data_keys.destroyed}`, `events ${s.events.erased + s.unrouted_events.erased}`, ...(s.partition_copies.erased > 0 ? [`partition copies ${s.partition_copies.erased}`] : []), `deliveries ${s.deliveries.erased} (${s.deliveries.already_gone} already delivered or gone)`,
    `attempts ${s.attempts.erased}`, `dead letters ${s.dead_letters.erased}`, `replays ${s.replays.erased}`, `rejected ${s.rejected.erased}`, `index entries ${s.index.erased}`,
    ...(r.routing_caught_up ? [] : ['routing had not caught up: run again']),
  ].join(', ');
}

export interface EndpointOut {
  id: string;
  tenant: string;
  url: string;
  events: string[];
  description: string | null;
  status: string;
  disabled_reason: string | null;
  disabled_at: string | null;
  rate_limit: number | null;
  /** Since when every attempt has failed (ENDPOINT_HEALTH); null while it succeeds. */
  failing_since: string | null;
  /** From its consumer; null when it has none (deleted, or not yet reconciled). */
  backlog: { pending: number; ack_pending: number } | null;
}

export interface EndpointListOut {
  data: EndpointOut[];
  next_cursor: string | null;
}

export interface OverviewOut {
  endpoints_by_status: Record<string, number>;
  /** The largest backlogs, largest first (at most 10). */
  backlogs: { endpoint: string; pending: number; ack_pending: number }[];
  dead_letters_24h: number;
  /** Counted from the newest record back; `capped` when more than 1,000 were read. */
  rejected_24h: { total: number; by_reason: Record<string, number>; capped: boolean };
  /** The latest operational events (OPS stream), newest first. */
  ops_events: { type: string; tenant: string | null; endpoint: string | null; at: string | null; webhook_id: string | null; reason: string | null }[];
  /** Endpoints with failed attempts in the last hour, the worst success ratio first (at most 10). */
  failing_endpoints: EndpointHealthOut[];
  /** Every endpoint's attempts per minute over the last 24 h (minutes without any left out). */
  per_minute: PerMinuteOut[];
}

export interface PerMinuteOut {
  minute: string;
  ok: number;
  failed: number;
}

export interface WindowStatsOut {
  attempts: number;
  ok: number;
  failed: number;
  /** ok / attempts; null without attempts. */
  success_ratio: number | null;
  /** Of the latest 10,000 attempts of the window. */
  p50_ms: number | null;
  p99_ms: number | null;
}

export interface EndpointHealthIn {
  endpoint: string;
}

export interface EndpointHealthOut extends EndpointOut {
  /** For people: active, failing since …, rate limited (N/s), disabled (reason since …), deleted. */
  state: string;
  last_hour: WindowStatsOut;
  last_day: WindowStatsOut;
  last_error: { at: string; status_code: number | null; error: string | null } | null;
  /** Only for one endpoint (admin.endpoints.health): its attempts per minute over the last 24 h. */
  per_minute?: PerMinuteOut[];
}

export interface AuditEntryOut {
  id: string;
  at: string;
  operator: string;
  /** dead_letter.show, dead_letter.replay, dead_letters.replay_many, rejected_event.show, endpoint.retry_now, operator.revoke, api_key.revoke, console.sign_in */
  action: string;
  /** What it was done to: a dead-letter id, a REJECTED seq, an endpoint id, a filter, an operator or key id. */
  target: string;
  /** `ok`, or the error code the action was refused with. */
  outcome: string;
  detail: string | null;
}

export interface AuditListOut {
  data: AuditEntryOut[];
  next_cursor: string | null;
}

export interface DeadLetterOut {
  id: string;
  endpoint_id: string;
  tenant: string;
  webhook_id: string;
  event_type: string;
  attempts: number;
  last_status: number | null;
  last_error: string | null;
  failed_at: string;
  created_at: string;
  dead_count: number;
  replay_count: number;
  last_replayed_at: string | null;
  status: DeadLetterStatus;
  /** The OpenTelemetry trace of the delivery that died last, when it carried one. */
  trace_id: string | null;
}

/** The wire shape of a stored dead letter. */
export const deadLetterOut = (r: DeadLetterRow): DeadLetterOut => ({
  id: r.id, endpoint_id: r.endpoint_id, tenant: r.tenant, webhook_id: r.webhook_id, event_type: r.event_type,
  attempts: r.attempts, last_status: r.last_status, last_error: r.last_error,
  failed_at: iso(r.failed_at), created_at: iso(r.created_at),
  dead_count: r.dead_count, replay_count: r.replay_count,
  last_replayed_at: r.last_replayed_at ? iso(r.last_replayed_at) : null, status: r.status, trace_id: r.trace_id ?? null,
});

export interface DeadLettersListOut {
  data: DeadLetterOut[];
  /** Pass as `cursor` for the next page; null on the last page. */
  next_cursor: string | null;
}

export interface OriginalMessageOut {
  subject: string;
  headers: Record<string, string[]>;
  /** The JSON body exactly as it was POSTed, parsed. */
  body: unknown;
}

export interface DeadLetterShowOut {
  dead_letter: DeadLetterOut;
  message: OriginalMessageOut;
  /**
   * Whether the row's authentication tag vouches for this message under this row (a replay needs it):
   * current, previous (the master key is being rotated), missing (stored before tags), invalid (forged or altered).
   */
  tag: TagCheck;
}

export interface ReplayOut {
  stream: string;
  seq: number;
  subject: string;
  msg_id: string;
  duplicate: boolean;
}

export interface DeadLetterReplayOut {
  dead_letter: DeadLetterOut;
  replay: ReplayOut;
}

export interface DeadLettersReplayManyOut {
  replayed: { id: string; endpoint_id: string; webhook_id: string; replay_count: number }[];
  failed: { id: string; error: AdminErrorReply['error'] }[];
  /** Matching records when the run started (the first request), carried through the cursor. */
  total: number;
  next_cursor: string | null;
}

export interface EndpointRetryNowOut {
  endpoint_id: string;
  /** Deliveries waiting for a retry that were handed back to the server for an attempt now. */
  brought_forward: number;
  /** Delivery instances that answered. Retries failed by an instance that has since stopped keep their schedule. */
  instances: number;
}

export const DeliveryState = {
  /**
   * In the endpoint's work queue (or, with direct delivery, held by its consumer of its partition stream),
   * no attempt has failed yet (waiting, or the first attempt is running).
   */
  Pending: 'pending',
  /** In the work queue after at least one failed attempt; next_attempt_at says when the next one is due. */
  Retrying: 'retrying',
  /** Gone from the work queue without dying: the endpoint answered 2xx. */
  Acknowledged: 'acknowledged',
  /** Retries ran out; a dead letter holds the message. */
  Dead: 'dead',
  /** Never queued: the endpoint's queue was full (HOOKSTREAM_MAX_QUEUED) when the event was routed. */
  Dropped: 'dropped',
  /** Not enough left to tell (see the reason): event aged out of EVENTS, endpoint deleted or created later, huge backlog. */
  Unknown: 'unknown',
} as const;
export type DeliveryState = (typeof DeliveryState)[keyof typeof DeliveryState];

export const WaitingOn = { RetryAfter: 'retry_after', RateLimit: 'rate_limit' } as const;
export type WaitingOn = (typeof WaitingOn)[keyof typeof WaitingOn];

export interface DeliveryShowOut {
  webhook_id: string;
  endpoint_id: string;
  state: DeliveryState;
  /** One sentence on how the state was derived, for people. */
  reason: string;
  tenant: string | null;
  event_type: string | null;
  /** Attempts of the current round (since the last replay, if any), the successful one included. */
  attempts: number;
  /** Of the last failed attempt (dead, retrying); null when acknowledged: successes are not recorded. */
  last_status: number | null;
  last_error: string | null;
  last_attempt_at: string | null;
  next_attempt_at: string | null;
  /**
   * Why a queued delivery waits beyond the retry schedule (issue 10): `retry_after` when the endpoint's
   * Retry-After set the next attempt, `rate_limit` when it waits for a slot of the endpoint's rate limit.
   */
  waiting_on: WaitingOn | null;
  /** Where it waits: its message in the endpoint's delivery stream or, with direct delivery, the event's copy in its partition stream. */
  queued: { stream: string; seq: number } | null;
  dead_letter: Pick<DeadLetterOut, 'id' | 'status' | 'dead_count' | 'replay_count' | 'last_replayed_at' | 'failed_at'> | null;
  /** Failed attempts recorded for this webhook-id and endpoint, oldest first, across rounds. */
  history: AttemptRecord[];
}

/** The admin protocol's error code for a service error code. */
export function adminCode(code: ErrorCode): AdminErrorCode {
  switch (code) {
    case ErrorCode.BadRequest:
    case ErrorCode.ValidationFailed:
      return AdminErrorCode.BadRequest;
    case ErrorCode.NotFound:
      return AdminErrorCode.NotFound;
    case ErrorCode.Conflict:
      return AdminErrorCode.Conflict;
    default:
      return AdminErrorCode.Internal;
  }
}

export const isAdminErrorReply = (x: unknown): x is AdminErrorReply =>
  typeof x === 'object' && x !== null && 'error' in x && typeof (x as AdminErrorReply).error?.code === 'string';

/** A rejected event without its body (the body is tenant data: only `admin.events.rejected.show` returns it). */
export interface RejectedEventOut {
  /** Sequence in the REJECTED stream: what `admin.events.rejected.show` takes. */
  seq: number;
  rejected_at: string;
  reason: string;
  detail: string;
  /** The subject the producer published to. */
  subject: string;
  /** From the subject; null when the subject holds no valid tenant id. */
  tenant: string | null;
  /** From the subject, as published (it may be unknown: see reason). */
  event: string | null;
  events_seq: number | null;
  event_time: string | null;
  /** How many times the router had been given the event. */
  deliveries: number | null;
  /** The original body's size in bytes. */
  size: number | null;
  /** Whether the stored body is only the first HOOKSTREAM_MAX_EVENT_BYTES of it. */
  truncated: boolean;
  producer_msg_id: string | null;
}

export interface RejectedEventsListOut {
  data: RejectedEventOut[];
  /** Pass as `cursor` for older records; null when none are left. May come with fewer than `limit` records. */
  next_cursor: string | null;
}

export interface RejectedEventShowOut {
  rejected: RejectedEventOut;
  /** The stored body, exactly (base64). */
  body_base64: string;
  /** The same body as text when it is valid UTF-8, else null. */
  body_text: string | null;
}

// ---- the delivery log (src/deliverylog/) ----

/** Deliveries in the log, newest first (by their latest attempt). */
export interface DeliveriesListIn {
  tenant?: string;
  endpoint?: string;
  event?: string;
  /** A user's (or organization's) deliveries, as the erasure index knows them: needs `tenant`. */
  user?: string;
  organization?: string;
  webhook_id?: string;
  /** ok, failed (the latest attempt failed), queued (failed, another attempt to come), dead, dropped. */
  status?: string;
  /** ISO 8601, on the latest attempt's time; since inclusive, until exclusive. */
  since?: string;
  until?: string;
  limit?: number;
  cursor?: string;
}

export interface DeliveryLogOut {
  webhook_id: string;
  endpoint_id: string;
  tenant: string;
  event_type: string;
  /** The latest attempt's outcome: ok, failed (another attempt is due at next_attempt_at), dead, dropped. */
  status: string;
  attempts: number;
  first_attempt_at: string;
  last_attempt_at: string;
  status_code: number | null;
  latency_ms: number;
  error: string | null;
  next_attempt_at: string | null;
}

export interface DeliveriesListOut {
  data: DeliveryLogOut[];
  next_cursor: string | null;
}

export interface DeliveryAttemptsIn {
  webhook_id: string;
  endpoint?: string;
}

export interface AttemptLogOut {
  endpoint_id: string;
  webhook_id: string;
  tenant: string;
  event_type: string;
  attempt: number;
  at: string;
  status: string;
  status_code: number | null;
  latency_ms: number;
  error_class: string | null;
  error: string | null;
  /** The receiver's answer, its first 1 KB. */
  response_body: string | null;
  next_attempt_at: string | null;
}

export interface DeliveryAttemptsOut {
  webhook_id: string;
  /** Oldest first, every endpoint's (or the one asked). */
  data: AttemptLogOut[];
}

/** Where a user's (or organization's) events, or one webhook-id's event, went. */
export interface EventsTraceIn {
  tenant?: string;
  user?: string;
  organization?: string;
  webhook_id?: string;
  limit?: number;
}

export interface TracedEventOut {
  /** Null for an event the router rejected (it never got one). */
  webhook_id: string | null;
  tenant: string;
  event_type: string | null;
  /** When the event was stored in EVENTS (null once it aged out). */
  at: string | null;
  /** `routed` or `not_routed`. */
  verdict: 'routed' | 'not_routed';
  /** For people: "routed to 2 endpoints: …" or "not routed: <reason>". */
  summary: string;
  deliveries: { endpoint_id: string; state: string; attempts: number; last_attempt_at: string | null; status_code: number | null }[];
}

export interface EventsTraceOut {
  data: TracedEventOut[];
}

/** One published event, by its tenant and its sequence in EVENTS (the publish acknowledgement's). */
export interface EventVerdictIn {
  tenant: string;
  seq: number;
}

/**
 * The router's verdict on one event: `routed` (to `endpoints`: the tenant's active endpoints that
 * subscribe to its type, as they are now), `rejected` (with the reason and detail stored in REJECTED), or
 * `pending` (the router has not decided yet: not reached, or handed back for a later try).
 */
export interface EventVerdictOut {
  verdict: 'routed' | 'rejected' | 'pending';
  endpoints: number | null;
  reason: string | null;
  detail: string | null;
}

/** An operator's action on an endpoint; `reason` is required to disable or delete, and is audited. */
export interface EndpointActionIn {
  endpoint: string;
  reason?: string;
}

export interface EndpointActionOut {
  endpoint_id: string;
  tenant: string;
  status: string;
  disabled_reason: string | null;
}
