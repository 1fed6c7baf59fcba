// The one place where an endpoint changes shape between the fold (EndpointState), the database entity
// (EndpointRecord) and the plain row the API reads (EndpointRow).
import type { EndpointState } from '../domain/endpoint.ts';
import type { EndpointRecord } from './entities.ts';

/**
 * An endpoint as the projection holds it: the fold's state without secrets (they never reach Postgres)
 * and without activeSince (only the delivery role needs it, from the stream).
 */
export type EndpointRow = Omit<EndpointState, 'secrets' | 'activeSince'>;

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

/** Rows carry no secrets, so the fold starts from none; secret events still move version and updatedAt. */
export const rowToState = (row: EndpointRow): EndpointState => ({ ...row, secrets: [] });

export function stateToRow(state: EndpointState): EndpointRow {
  const { secrets: _ignored, activeSince: _alsoIgnored, eventsSince: _norThis, ...row } = state;
  return row;
}
