// The one place where an endpoint changes shape between the fold (EndpointState), the database entity
// (EndpointRecord) and the plain row the API reads (EndpointRow).
import type { EndpointState } from '../domain/endpoint.ts';
import type { EndpointRecord } from './entities.ts';

/**
 * An endpoint as the projection holds it: the fold's state without secrets (they never reach Postgres)
 * and without activeSince, orderedSince, directAfter and keyedUntil (only the delivery role and the router
 * need them, from the stream).
 */
export type EndpointRow = Omit<EndpointState, 'secrets' | 'activeSince' | 'orderedSince' | 'directAfter' | 'keyedUntil'>;

export function recordToRow(r: EndpointRecord): EndpointRow {
  return {
    id: r.id as EndpointRow['id'],
    tenant: r.tenant as EndpointRow['tenant'],
    url: r.url,
    events: r.events,
    description: r.description ?? null,
    status: r.status,
    signatureScheme: r.signatureScheme,
    signingPublicKey: r.signingPublicKey ?? null,
    rateLimit: r.rateLimit ?? null,
    ordering: r.ordering,
    disabledReason: r.disabledReason ?? null,
    disabledAt: r.disabledAt ? r.disabledAt.toISOString() : null,
    createdAt: r.createdAt.toISOString(),
    updatedAt: r.updatedAt.toISOString(),
    version: r.version,
  };
}

/** The `endpoints` table's columns, in the order the raw statements (projections/endpoints.ts, queries.ts) name them. */
export const ENDPOINT_COLUMNS = [
  'id', 'tenant', 'url', 'events', 'description', 'status', 'signature_scheme', 'signing_public_key', 'rate_limit', 'ordering',
  'disabled_reason', 'disabled_at', 'created_at', 'updated_at', 'version',
] as const;

/** A row as the driver answers a plain `select` of ENDPOINT_COLUMNS (bigint and timestamptz as text, jsonb parsed). */
export type EndpointColumns = {
  id: string; tenant: string; url: string; events: EndpointRow['events']; description: string | null; status: EndpointRow['status'];
  signature_scheme: EndpointRow['signatureScheme']; signing_public_key: string | null; rate_limit: number | null;
  ordering: EndpointRow['ordering']; disabled_reason: EndpointRow['disabledReason']; disabled_at: string | null;
  created_at: string; updated_at: string; version: string | number;
};

const iso = (timestamptz: string) => new Date(timestamptz).toISOString();

/**
 * A plain select's row as the API reads it. The per-write paths (a command's projection batch, a GET) read
 * rows this way rather than as entities: hydrating one cost the API's thread more allocation than the rest
 * of the request, and its scavenges are the pauses a tenant's write waits out.
 */
export function columnsToRow(c: EndpointColumns): EndpointRow {
  return {
    id: c.id as EndpointRow['id'],
    tenant: c.tenant as EndpointRow['tenant'],
    url: c.url,
    events: c.events,
    description: c.description,
    status: c.status,
    signatureScheme: c.signature_scheme,
    signingPublicKey: c.signing_public_key,
    rateLimit: c.rate_limit,
    ordering: c.ordering,
    disabledReason: c.disabled_reason,
    disabledAt: c.disabled_at ? iso(c.disabled_at) : null,
    createdAt: iso(c.created_at),
    updatedAt: iso(c.updated_at),
    version: Number(c.version),
  };
}

/** Rows carry no secrets, so the fold starts from none; secret events still move version and updatedAt. */
export const rowToState = (row: EndpointRow): EndpointState => ({ ...row, secrets: [] });

export function stateToRow(state: EndpointState): EndpointRow {
  const { secrets: _ignored, activeSince: _alsoIgnored, orderedSince: _either, directAfter: _direct, keyedUntil: _keyed, eventsSince: _norThis, ...row } = state;
  return row;
}
