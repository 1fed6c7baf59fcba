// The Postgres tables as MikroORM entities (defineEntity: no decorators, so Node's type stripping runs
// this file as is). The schema itself is written by hand in src/db/migrations/; a test checks that
// these definitions and the migrated database agree.
import { defineEntity, p, type InferEntity } from '@mikro-orm/core';
import type { EventPattern } from '../domain/catalogue.ts';
import type { DisabledReason, EndpointStatus, Ordering } from '../domain/endpoint.ts';
import type { SignatureScheme } from '../domain/signature.ts';
import { DEAD_LETTER_STATUSES, DeadLetterStatus } from '../deadletter/store.ts';

/**
 * Read model of the ENDPOINTS stream. Signing secrets never land here: they live only in the stream,
 * sealed. A v1a endpoint's public key does (it is not secret, and every read shows it).
 */
export const EndpointRecord = defineEntity({
  name: 'EndpointRecord',
  tableName: 'endpoints',
  properties: {
    // Byte order ("C"), whatever the database's locale: pages are cut at `id < cursor`, and ids sort by time.
    id: p.text().primary().collation('C'),
    tenant: p.text(),
    url: p.text(),
    events: p.json<EventPattern[]>(),
    description: p.text().nullable(),
    status: p.text().$type<EndpointStatus>(),
    signatureScheme: p.text().$type<SignatureScheme>().default('v1'),
    signingPublicKey: p.text().nullable(),
    rateLimit: p.integer().nullable(),
    ordering: p.text().$type<Ordering>().default('none'),
    disabledReason: p.text().$type<DisabledReason>().nullable(),
    disabledAt: p.datetime().nullable(),
    createdAt: p.datetime(),
    updatedAt: p.datetime(),
    // Stream sequence of the last applied event; a number is exact up to 2^53, far beyond any stream.
    version: p.bigint('number'),
  },
  // Ids are time-ordered, so (tenant, id desc) serves the newest-first cursor pages of one tenant.
  indexes: [{ name: 'endpoints_tenant_id_idx', columns: [{ name: 'tenant' }, { name: 'id', sort: 'DESC' }] }],
  checks: [
    { name: 'endpoints_status_check', expression: "status in ('active', 'disabled', 'deleted')" },
    { name: 'endpoints_disabled_reason_check', expression: "disabled_reason in ('gone', 'failing', 'operator')" },
    { name: 'endpoints_signature_scheme_check', expression: "signature_scheme in ('v1', 'v1a')" },
    { name: 'endpoints_ordering_check', expression: "ordering in ('none', 'key')" },
  ],
});
export type EndpointRecord = InferEntity<typeof EndpointRecord>;

/** Position of each projector in its stream, written in the same transaction as the rows it covers. */
export const ProjectionCheckpoint = defineEntity({
  name: 'ProjectionCheckpoint',
  tableName: 'projection_checkpoints',
  properties: {
    name: p.text().primary(),
    lastSeq: p.bigint('number'),
  },
});
export type ProjectionCheckpoint = InferEntity<typeof ProjectionCheckpoint>;

/** An event a projector skipped (issue 23): its stream sequence and why; written with the checkpoint past it. */
export const ProjectionSkip = defineEntity({
  name: 'ProjectionSkip',
  tableName: 'projection_skips',
  properties: {
    name: p.text().primary(),
    seq: p.bigint('number').primary(),
    reason: p.text(),
    skippedAt: p.datetime(),
  },
});
export type ProjectionSkip = InferEntity<typeof ProjectionSkip>;

/**
 * One routed event's copies, by subject hash (issue 22): the erasure-index read model. Its SQL lives in
 * src/erasure/index-store.ts; the entity only describes the table.
 */
export const ErasureIndexRow = defineEntity({
  name: 'ErasureIndexRow',
  tableName: 'erasure_index',
  properties: {
    tenant: p.text().primary(),
    subjectHash: p.text().primary(),
    eventsSeq: p.bigint('number').primary(),
    webhookId: p.text(),
    deliveries: p.json<[string, number, string][]>(),
    indexedAt: p.datetime(),
  },
  indexes: [{ name: 'erasure_index_indexed_at', properties: ['indexedAt'] }],
});
export type ErasureIndexRow = InferEntity<typeof ErasureIndexRow>;

/**
 * A tenant's `Idempotency-Key` (src/api/idempotency.ts): a create's claims the endpoint id; another POST's
 * keeps its first answer, sealed.
 */
export const IdempotencyKey = defineEntity({
  name: 'IdempotencyKey',
  tableName: 'idempotency_keys',
  properties: {
    tenant: p.text().primary(),
    key: p.text().primary(),
    requestHash: p.text(),
    endpointId: p.text().nullable(),
    answer: p.text().nullable(),
    createdAt: p.datetime().index('idempotency_keys_created_at_idx'),
  },
});
export type IdempotencyKey = InferEntity<typeof IdempotencyKey>;

/** A delivery that ran out of retries; the original message is sealed to the dead-letter public key and tagged. */
export const DeadLetter = defineEntity({
  name: 'DeadLetter',
  tableName: 'dead_letters',
  properties: {
    id: p.text().primary(),
    endpointId: p.text(),
    tenant: p.text(),
    webhookId: p.text(),
    eventType: p.text(),
    attempts: p.integer(),
    lastStatus: p.integer().nullable(),
    lastError: p.text().nullable(),
    failedAt: p.datetime(),
    sealed: p.blob(),
    /** HMAC of the row's identity and message under a key derived from the master key; null before issue 23. */
    tag: p.blob().nullable(),
    sourceStream: p.text(),
    sourceSeq: p.bigint('number'),
    createdAt: p.datetime(),
    deadCount: p.integer().default(1),
    replayCount: p.integer().default(0),
    lastReplayedAt: p.datetime().nullable(),
    status: p.text().$type<DeadLetterStatus>().default(DeadLetterStatus.Dead),
    /** Keyed hashes of the subject ids its message carries (erasure, issue 22); null before it. */
    subjectHashes: p.array().nullable(),
    /** The trace id of the delivery that died last (issue 20); null without a traceparent. */
    traceId: p.text().nullable(),
    /** Where each replay was published ([stream, seq] pairs), so erasure can delete those still queued. */
    replayedTo: p.json<[string, number][]>().default('[]'),
  },
  // One record per message and endpoint: a repeated max-deliveries advisory finds the existing row.
  checks: [{ name: 'dead_letters_status_check', expression: `status in (${DEAD_LETTER_STATUSES.map((s) => `'${s}'`).join(', ')})` }],
  uniques: [{ name: 'dead_letters_endpoint_webhook_key', properties: ['endpointId', 'webhookId'] }],
  indexes: [
    { name: 'dead_letters_tenant_idx', columns: [{ name: 'tenant' }, { name: 'failed_at', sort: 'DESC' }] },
    { name: 'dead_letters_endpoint_idx', columns: [{ name: 'endpoint_id' }, { name: 'failed_at', sort: 'DESC' }] },
    { name: 'dead_letters_event_idx', columns: [{ name: 'event_type' }, { name: 'failed_at', sort: 'DESC' }] },
    { name: 'dead_letters_failed_at_idx', columns: [{ name: 'failed_at', sort: 'DESC' }] },
    { name: 'dead_letters_source_idx', properties: ['sourceStream', 'sourceSeq'] },
    { name: 'dead_letters_subject_hashes', properties: ['subjectHashes'], type: 'gin' },
  ],
});
export type DeadLetter = InferEntity<typeof DeadLetter>;

/** A tenant's API key, kept only as its sha256; `prefix` lets people tell keys apart in listings. */
export const ApiKey = defineEntity({
  name: 'ApiKey',
  tableName: 'api_keys',
  properties: {
    id: p.text().primary(),
    tenant: p.text(),
    name: p.text().nullable(),
    hash: p.blob().unique('api_keys_hash_key'),
    prefix: p.text(),
    createdAt: p.datetime(),
    revokedAt: p.datetime().nullable(),
  },
  indexes: [{ name: 'api_keys_tenant_idx', properties: ['tenant', 'createdAt'] }],
});
export type ApiKey = InferEntity<typeof ApiKey>;

/** An operator of the console and the CLI (issue 19); the key is kept only as its sha256, names are never reused. */
export const Operator = defineEntity({
  name: 'Operator',
  tableName: 'operators',
  properties: {
    id: p.text().primary(),
    name: p.text().unique('operators_name_key'),
    hash: p.blob().unique('operators_hash_key'),
    prefix: p.text(),
    createdAt: p.datetime(),
    revokedAt: p.datetime().nullable(),
  },
});
export type Operator = InferEntity<typeof Operator>;

/** A console session: the sha256 (hex) of its cookie's token, whose operator, until when. */
export const ConsoleSession = defineEntity({
  name: 'ConsoleSession',
  tableName: 'console_sessions',
  properties: {
    tokenHash: p.text().primary(),
    operatorId: p.text(),
    createdAt: p.datetime(),
    expiresAt: p.datetime().index('console_sessions_expires_at_idx'),
  },
});
export type ConsoleSession = InferEntity<typeof ConsoleSession>;

/** One operator action (src/audit/store.ts); ids are time-ordered, newest-first pages are cut on them. */
export const AuditEntry = defineEntity({
  name: 'AuditEntry',
  tableName: 'audit_log',
  properties: {
    id: p.text().primary().collation('C'),
    at: p.datetime(),
    operator: p.text(),
    action: p.text(),
    target: p.text(),
    outcome: p.text(),
    detail: p.text().nullable(),
  },
  indexes: [{ name: 'audit_log_operator_idx', properties: ['operator', 'id'] }],
});
export type AuditEntry = InferEntity<typeof AuditEntry>;

/** A tenant portal link (single use, minutes) or session (an hour), by the sha256 (hex) of its token. */
export const PortalSession = defineEntity({
  name: 'PortalSession',
  tableName: 'portal_sessions',
  properties: {
    tokenHash: p.text().primary(),
    kind: p.text().$type<'link' | 'session'>(),
    tenant: p.text(),
    keyId: p.text(),
    createdAt: p.datetime(),
    expiresAt: p.datetime().index('portal_sessions_expires_at_idx'),
    usedAt: p.datetime().nullable(),
  },
  checks: [{ name: 'portal_sessions_kind_check', expression: "kind in ('link', 'session')" }],
});
export type PortalSession = InferEntity<typeof PortalSession>;

/** A tenant's quota overrides (src/tenants/limits.ts); `*` overrides the defaults; null: the default. */
export const TenantLimitsRecord = defineEntity({
  name: 'TenantLimitsRecord',
  tableName: 'tenant_limits',
  properties: {
    tenant: p.text().primary(),
    endpoints: p.integer().nullable(),
    writesPerSecond: p.integer().nullable(),
    queuedDeliveries: p.integer().nullable(),
    eventsPerSecond: p.integer().nullable(),
    updatedAt: p.datetime(),
    updatedBy: p.text(),
  },
});
export type TenantLimitsRecord = InferEntity<typeof TenantLimitsRecord>;

export const ENTITIES = [EndpointRecord, ProjectionCheckpoint, ProjectionSkip, ErasureIndexRow, IdempotencyKey, DeadLetter, ApiKey, Operator, ConsoleSession, AuditEntry, PortalSession, TenantLimitsRecord];
