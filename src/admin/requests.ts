// Parsing admin request bodies into typed queries: strict (unknown fields and wrong types are errors
// that name the field, so a typo never widens a replay), defaults filled, limits clamped.
import { isEventName } from '../domain/catalogue.ts';
import { EndpointStatus } from '../domain/endpoint.ts';

const ENDPOINT_STATUSES: readonly string[] = Object.values(EndpointStatus);
import { isEndpointId, isMessageId, isTenantId, TENANT_ID_RULE, type EndpointId, type MessageId, type TenantId } from '../domain/ids.ts';
import { badRequest } from '../errors.ts';
import { SUBJECT_KINDS, type SubjectRef } from '../erasure/subject-hash.ts';
import { AUDIT_ACTIONS, isAuditAction, type AuditFilter } from '../audit/store.ts';
import { isOperatorName, OPERATOR_NAME_RULE } from '../operators/store.ts';
import { DEAD_LETTER_STATUSES, DeadLetterStatus, isDeadLetterId, isDeadLetterStatus, type DeadLetterFilter, type DeadLetterId } from '../deadletter/store.ts';

export const DEFAULT_PAGE = 50;
export const MAX_PAGE = 500;
export const DEFAULT_REPLAY_BATCH = 100;

// Ids are checked here once and carried branded (DeadLetterFilter, the queries below), so nothing after
// the parse casts them again.
export interface Page {
  limit: number;
  cursor?: string;
}

type Body = Record<string, unknown>;

/** The request payload as a JSON object; an empty payload is an empty object. */
export function parseBody(data: Uint8Array): Body {
  const text = new TextDecoder().decode(data).trim();
  if (text === '') return {};
  let x: unknown;
  try {
    x = JSON.parse(text);
  } catch {
    throw badRequest('request is not valid JSON');
  }
  if (typeof x !== 'object' || x === null || Array.isArray(x)) throw badRequest('request must be a JSON object');
  return x as Body;
}

function onlyFields(body: Body, allowed: readonly string[]): void {
  const unknown = Object.keys(body).filter((k) => !allowed.includes(k));
  if (unknown.length) throw badRequest(`unknown field${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')}; allowed: ${allowed.join(', ')}`);
}

function optionalString(body: Body, field: string): string | undefined {
  const v = body[field];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string' || v === '') throw badRequest(`${field} must be a non-empty string`);
  return v;
}

function requiredString(body: Body, field: string): string {
  const v = optionalString(body, field);
  if (v === undefined) throw badRequest(`${field} is required`);
  return v;
}

// ISO 8601 with a date, optionally a time and a zone; a time without a zone is read as UTC.
const ISO_TIME = /^\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d{1,9})?)?(?:Z|[+-]\d{2}:?\d{2})?)?$/;

function optionalTime(body: Body, field: string): Date | undefined {
  const v = optionalString(body, field);
  if (v === undefined) return undefined;
  const zoned = /(?:Z|[+-]\d{2}:?\d{2})$/.test(v) || !v.includes(':') ? v : `${v}Z`;
  const t = ISO_TIME.test(v) ? Date.parse(zoned.replace(' ', 'T')) : NaN;
  if (!Number.isFinite(t)) throw badRequest(`${field} must be an ISO 8601 time such as 2026-01-31T12:00:00Z, got ${JSON.stringify(v)}`);
  return new Date(t);
}

function limitOf(body: Body, fallback: number): number {
  const v = body['limit'];
  if (v === undefined || v === null) return fallback;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1 || v > MAX_PAGE) throw badRequest(`limit must be a whole number from 1 to ${MAX_PAGE}`);
  return v;
}

const FILTER_FIELDS = ['tenant', 'endpoint', 'event', 'since', 'until'] as const;

function filterOf(body: Body): DeadLetterFilter {
  const f: DeadLetterFilter = {};
  const tenant = optionalString(body, 'tenant');
  if (tenant !== undefined) {
    if (!isTenantId(tenant)) throw badRequest(`tenant must be ${TENANT_ID_RULE}`);
    f.tenant = tenant;
  }
  const endpoint = optionalString(body, 'endpoint');
  if (endpoint !== undefined) {
    if (!isEndpointId(endpoint)) throw badRequest(`endpoint must be an endpoint id (webhook_…), got ${JSON.stringify(endpoint)}`);
    f.endpoint = endpoint;
  }
  const event = optionalString(body, 'event');
  if (event !== undefined) {
    if (!isEventName(event)) throw badRequest(`event ${JSON.stringify(event)} is not an event name`);
    f.event = event;
  }
  const since = optionalTime(body, 'since');
  const until = optionalTime(body, 'until');
  if (since && until && since.getTime() >= until.getTime()) throw badRequest('since must be before until');
  if (since) f.since = since;
  if (until) f.until = until;
  return f;
}

export function parseListRequest(body: Body): { filter: DeadLetterFilter; page: Page } {
  onlyFields(body, [...FILTER_FIELDS, 'status', 'webhook_id', 'limit', 'cursor']);
  const filter = filterOf(body);
  const webhookId = optionalString(body, 'webhook_id');
  if (webhookId !== undefined) {
    if (!isMessageId(webhookId)) throw badRequest(`webhook_id must be a message id (msg_…), got ${JSON.stringify(webhookId)}`);
    filter.webhookId = webhookId;
  }
  const status = optionalString(body, 'status');
  if (status !== undefined) {
    if (!isDeadLetterStatus(status)) throw badRequest(`status must be ${DEAD_LETTER_STATUSES.join(' or ')}`);
    filter.status = status;
  }
  return { filter, page: { limit: limitOf(body, DEFAULT_PAGE), ...optionalCursor(body) } };
}

export function parseReplayManyRequest(body: Body): { filter: DeadLetterFilter; page: Page; dryRun: boolean } {
  onlyFields(body, [...FILTER_FIELDS, 'limit', 'cursor', 'dry_run']);
  const filter = filterOf(body);
  // An empty filter would replay every dead letter of every tenant: too easy to send by mistake.
  if (Object.keys(filter).length === 0) throw badRequest(`replay_many needs at least one of ${FILTER_FIELDS.join(', ')}`);
  const dryRun = body['dry_run'];
  if (dryRun !== undefined && typeof dryRun !== 'boolean') throw badRequest('dry_run must be true or false');
  return {
    filter: { ...filter, status: DeadLetterStatus.Dead }, page: { limit: limitOf(body, DEFAULT_REPLAY_BATCH), ...optionalCursor(body) },
    dryRun: dryRun === true,
  };
}

function optionalCursor(body: Body): { cursor?: string } {
  const cursor = optionalString(body, 'cursor');
  return cursor === undefined ? {} : { cursor };
}

export function parseShowRequest(body: Body): { id: DeadLetterId } {
  onlyFields(body, ['id']);
  const id = requiredString(body, 'id');
  if (!isDeadLetterId(id)) throw badRequest(`id must be a dead-letter id (dl_…), got ${JSON.stringify(id)}`);
  return { id };
}

export function parseReplayRequest(body: Body): { id: DeadLetterId; force: boolean } {
  onlyFields(body, ['id', 'force']);
  const { id } = parseShowRequest({ id: body['id'] });
  const force = body['force'];
  if (force !== undefined && typeof force !== 'boolean') throw badRequest('force must be true or false');
  return { id, force: force === true };
}

/** Erasure of one data subject's payloads (issue 22): a tenant and exactly one of user, organization. */
export function parseEraseSubjectRequest(body: Body): { tenant: TenantId; subject: SubjectRef } {
  onlyFields(body, ['tenant', ...SUBJECT_KINDS]);
  const tenant = requiredString(body, 'tenant');
  if (!isTenantId(tenant)) throw badRequest(`tenant must be ${TENANT_ID_RULE}`);
  const given = SUBJECT_KINDS.filter((k) => body[k] !== undefined && body[k] !== null);
  if (given.length !== 1) throw badRequest(`name exactly one of ${SUBJECT_KINDS.join(', ')}`);
  const kind = given[0]!;
  const id = requiredString(body, kind);
  // What the router indexes (src/erasure/subject-hash.ts); anything longer was never indexed.
  if (id.length > 256 || /[\u0000-\u001f]/.test(id)) throw badRequest(`${kind} must be an id of at most 256 characters, without control characters`);
  return { tenant, subject: { kind, id } };
}

export function parseRetryNowRequest(body: Body): { endpoint: EndpointId } {
  onlyFields(body, ['endpoint']);
  const endpoint = requiredString(body, 'endpoint');
  if (!isEndpointId(endpoint)) throw badRequest(`endpoint must be an endpoint id (webhook_…), got ${JSON.stringify(endpoint)}`);
  return { endpoint };
}

export function parseDeliveryRequest(body: Body): { webhookId: MessageId; endpoint: EndpointId } {
  onlyFields(body, ['webhook_id', 'endpoint']);
  // Both present before either format: a request missing one is told that first.
  const webhookId = requiredString(body, 'webhook_id');
  const endpoint = requiredString(body, 'endpoint');
  if (!isMessageId(webhookId)) throw badRequest(`webhook_id must be a message id (msg_…), got ${JSON.stringify(webhookId)}`);
  if (!isEndpointId(endpoint)) throw badRequest(`endpoint must be an endpoint id (webhook_…), got ${JSON.stringify(endpoint)}`);
  return { webhookId, endpoint };
}

/** Page cursor of rejected events: base64url JSON of the REJECTED sequence the next page starts below. */
export const encodeRejectedCursor = (before: number): string => Buffer.from(JSON.stringify({ before })).toString('base64url');

function decodeRejectedCursor(text: string): number {
  let x: unknown;
  try { x = JSON.parse(Buffer.from(text, 'base64url').toString('utf8')); } catch { x = undefined; }
  const before = (x as { before?: unknown } | undefined)?.before;
  if (typeof before !== 'number' || !Number.isSafeInteger(before) || before < 1) throw badRequest('cursor is not one this service handed out');
  return before;
}

export interface RejectedQuery {
  tenant?: TenantId;
  limit: number;
  /** Only records below this REJECTED sequence (from the cursor). */
  before?: number;
}

export function parseRejectedListRequest(body: Body): RejectedQuery {
  onlyFields(body, ['tenant', 'limit', 'cursor']);
  const q: RejectedQuery = { limit: limitOf(body, DEFAULT_PAGE) };
  const tenant = optionalString(body, 'tenant');
  if (tenant !== undefined) {
    if (!isTenantId(tenant)) throw badRequest(`tenant must be ${TENANT_ID_RULE}`);
    q.tenant = tenant;
  }
  const cursor = optionalString(body, 'cursor');
  if (cursor !== undefined) q.before = decodeRejectedCursor(cursor);
  return q;
}

export function parseRejectedShowRequest(body: Body): { seq: number } {
  onlyFields(body, ['seq']);
  const seq = body['seq'];
  if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 1) throw badRequest('seq must be a whole number from 1 (the seq of a listed rejected event)');
  return { seq };
}

const AUDIT_CURSOR = /^aud_[0-9a-z]{26}$/;

export function parseAuditListRequest(body: Body): { filter: AuditFilter; page: { before?: string; limit: number } } {
  onlyFields(body, ['operator', 'action', 'target', 'limit', 'cursor']);
  const filter: AuditFilter = {};
  const operator = optionalString(body, 'operator');
  if (operator !== undefined) {
    if (!isOperatorName(operator)) throw badRequest(`operator must be ${OPERATOR_NAME_RULE}`);
    filter.operator = operator;
  }
  const action = optionalString(body, 'action');
  if (action !== undefined) {
    if (!isAuditAction(action)) throw badRequest(`action must be one of ${AUDIT_ACTIONS.join(', ')}`);
    filter.action = action;
  }
  const target = optionalString(body, 'target');
  if (target !== undefined) {
    if (target.length > 200) throw badRequest('target must be at most 200 characters');
    filter.target = target;
  }
  const cursor = optionalString(body, 'cursor');
  if (cursor !== undefined && !AUDIT_CURSOR.test(cursor)) throw badRequest('cursor is not one this service handed out');
  return { filter, page: { limit: limitOf(body, DEFAULT_PAGE), ...(cursor ? { before: cursor } : {}) } };
}

export interface EndpointListQuery {
  tenant?: TenantId;
  status?: EndpointStatus;
  limit: number;
  cursor?: EndpointId;
}

export function parseEndpointListRequest(body: Body): EndpointListQuery {
  onlyFields(body, ['tenant', 'status', 'limit', 'cursor']);
  const q: EndpointListQuery = { limit: limitOf(body, DEFAULT_PAGE) };
  const tenant = optionalString(body, 'tenant');
  if (tenant !== undefined) {
    if (!isTenantId(tenant)) throw badRequest(`tenant must be ${TENANT_ID_RULE}`);
    q.tenant = tenant;
  }
  const status = optionalString(body, 'status');
  if (status !== undefined) {
    if (!ENDPOINT_STATUSES.includes(status)) throw badRequest(`status must be one of ${ENDPOINT_STATUSES.join(', ')}`);
    q.status = status as EndpointStatus;
  }
  const cursor = optionalString(body, 'cursor');
  if (cursor !== undefined) {
    if (!isEndpointId(cursor)) throw badRequest('cursor is not one this service handed out');
    q.cursor = cursor;
  }
  return q;
}

export function parseEmptyRequest(body: Body): void {
  onlyFields(body, []);
}

// ---- the delivery log (issue 31) ----

export const DELIVERY_LOG_STATUSES = ['ok', 'failed', 'queued', 'dead', 'dropped'] as const;

/** A user or organization, as the erasure index knows them; one at most, and only with a tenant. */
function subjectOf(body: Body, tenant: TenantId | undefined): SubjectRef | undefined {
  const given = (['user', 'organization'] as const).filter((k) => body[k] !== undefined && body[k] !== null);
  if (given.length === 0) return undefined;
  if (given.length > 1) throw badRequest('name one of user, organization');
  if (!tenant) throw badRequest(`${given[0]} needs tenant (user and organization ids are a tenant's)`);
  const kind = given[0]!;
  const id = requiredString(body, kind);
  if (id.length > 256 || /[\u0000-\u001f]/.test(id)) throw badRequest(`${kind} must be an id of at most 256 characters, without control characters`);
  return { kind, id };
}

function optionalTenant(body: Body): TenantId | undefined {
  const tenant = optionalString(body, 'tenant');
  if (tenant !== undefined && !isTenantId(tenant)) throw badRequest(`tenant must be ${TENANT_ID_RULE}`);
  return tenant;
}

function optionalWebhookId(body: Body): MessageId | undefined {
  const webhookId = optionalString(body, 'webhook_id');
  if (webhookId !== undefined && !isMessageId(webhookId)) throw badRequest(`webhook_id must be a message id (msg_…), got ${JSON.stringify(webhookId)}`);
  return webhookId;
}

export interface DeliveryLogQuery {
  tenant?: TenantId;
  endpoint?: EndpointId;
  event?: string;
  subject?: SubjectRef;
  webhookId?: MessageId;
  status?: (typeof DELIVERY_LOG_STATUSES)[number];
  since?: Date;
  until?: Date;
  limit: number;
  cursor?: string;
}

export function parseDeliveryLogRequest(body: Body): DeliveryLogQuery {
  onlyFields(body, ['tenant', 'endpoint', 'event', 'user', 'organization', 'webhook_id', 'status', 'since', 'until', 'limit', 'cursor']);
  const { tenant, endpoint, event, since, until } = filterOf(body);
  const q: DeliveryLogQuery = { limit: limitOf(body, DEFAULT_PAGE) };
  if (tenant) q.tenant = tenant;
  if (endpoint) q.endpoint = endpoint;
  if (event) q.event = event;
  if (since) q.since = since;
  if (until) q.until = until;
  const subject = subjectOf(body, tenant);
  if (subject) q.subject = subject;
  const webhookId = optionalWebhookId(body);
  if (webhookId) q.webhookId = webhookId;
  const status = optionalString(body, 'status');
  if (status !== undefined) {
    if (!(DELIVERY_LOG_STATUSES as readonly string[]).includes(status)) throw badRequest(`status must be one of ${DELIVERY_LOG_STATUSES.join(', ')}`);
    q.status = status as DeliveryLogQuery['status'];
  }
  const cursor = optionalString(body, 'cursor');
  if (cursor !== undefined) q.cursor = cursor;
  return q;
}

export function parseDeliveryAttemptsRequest(body: Body): { webhookId: MessageId; endpoint?: EndpointId } {
  onlyFields(body, ['webhook_id', 'endpoint']);
  const webhookId = optionalWebhookId(body);
  if (!webhookId) throw badRequest('webhook_id is required');
  const endpoint = optionalString(body, 'endpoint');
  if (endpoint !== undefined && !isEndpointId(endpoint)) throw badRequest(`endpoint must be an endpoint id (webhook_…), got ${JSON.stringify(endpoint)}`);
  return endpoint ? { webhookId, endpoint } : { webhookId };
}

export interface TraceQuery {
  tenant?: TenantId;
  subject?: SubjectRef;
  webhookId?: MessageId;
  limit: number;
}

export function parseTraceRequest(body: Body): TraceQuery {
  onlyFields(body, ['tenant', 'user', 'organization', 'webhook_id', 'limit']);
  const tenant = optionalTenant(body);
  const subject = subjectOf(body, tenant);
  const webhookId = optionalWebhookId(body);
  if (!subject === !webhookId) throw badRequest('name a webhook_id, or a tenant with a user or an organization');
  return { ...(tenant ? { tenant } : {}), ...(subject ? { subject } : {}), ...(webhookId ? { webhookId } : {}), limit: limitOf(body, 20) };
}

/** One published event: its tenant and its sequence in EVENTS. */
export function parseVerdictRequest(body: Body): { tenant: TenantId; seq: number } {
  onlyFields(body, ['tenant', 'seq']);
  const tenant = optionalTenant(body);
  if (!tenant) throw badRequest('tenant is required');
  const seq = body['seq'];
  if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 1) throw badRequest('seq must be a whole number from 1 (the EVENTS sequence of the publish)');
  return { tenant, seq };
}

/** A request naming one endpoint (`{endpoint}`): endpoint health. */
export const parseEndpointRequest = parseRetryNowRequest;

/** An operator's action on an endpoint: its id, and a reason (required to disable or delete; at most 200 characters). */
export function parseEndpointActionRequest(body: Body, reason: 'required' | 'none'): { endpoint: EndpointId; reason?: string } {
  onlyFields(body, reason === 'required' ? ['endpoint', 'reason'] : ['endpoint']);
  const { endpoint } = parseRetryNowRequest({ endpoint: body['endpoint'] });
  if (reason === 'none') return { endpoint };
  const text = requiredString(body, 'reason').trim();
  if (text === '' || text.length > 200 || /[\u0000-\u001f]/.test(text)) throw badRequest('reason must be 1-200 characters, without control characters');
  return { endpoint, reason: text };
}
