// `Idempotency-Key` on POST /v1/webhooks (issue 23), as Stripe and Svix have it: a create retried with the
// same key within 24 hours answers the first create's endpoint, signing secret included, instead of a
// second endpoint (or, after a publish timeout whose write was stored, a 500 and a secret lost for good).
// The key claims, in Postgres, the endpoint id its create uses; the create appends with "no event on this
// id yet", so of any number of tries exactly one creates and the others read that endpoint back.
import { createHash } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { newEndpointId, type EndpointId, type TenantId } from '../domain/ids.ts';
import { badRequest, conflict } from '../errors.ts';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
/** Printable ASCII, as Stripe allows; a UUID or ULID is the usual choice. */
const KEY = /^[\x21-\x7e]{1,255}$/;
const WINDOW = "interval '24 hours'";
/** One claim in this many also removes expired keys. */
const SWEEP_EVERY = 100;

/** The request's key, or undefined without one; a malformed key is a 400. */
export function idempotencyKey(value: string | string[] | undefined): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !KEY.test(value)) {
    throw badRequest('Idempotency-Key must be 1-255 printable ASCII characters (a UUID, say), sent once');
  }
  return value;
}

export const requestHash = (input: unknown): string => createHash('sha256').update(JSON.stringify(input)).digest('base64url');

let claims = 0;

/**
 * The endpoint id `key` stands for: a fresh one on its first use (or after 24 hours), the same one on a
 * retry of the same request; a 409 when the key was used with another request.
 */
export async function claimEndpointId(em: EntityManager, tenant: TenantId, key: string, hash: string): Promise<EndpointId> {
  if (++claims % SWEEP_EVERY === 0) await em.execute(`delete from idempotency_keys where created_at < now() - ${WINDOW}`);
  const [claimed] = await em.execute<{ endpoint_id: EndpointId; request_hash: string }[]>(`
    insert into idempotency_keys (tenant, key, request_hash, endpoint_id, created_at) values (?, ?, ?, ?, now())
    on conflict (tenant, key) do update set request_hash = excluded.request_hash, endpoint_id = excluded.endpoint_id, created_at = now()
      where idempotency_keys.created_at < now() - ${WINDOW}
    returning endpoint_id, request_hash`, [tenant, key, hash, newEndpointId()]);
  const row = claimed ?? (await em.execute<{ endpoint_id: EndpointId; request_hash: string }[]>(
    'select endpoint_id, request_hash from idempotency_keys where tenant = ? and key = ?', [tenant, key]))[0];
  if (!row) throw conflict('Idempotency-Key is being claimed concurrently; retry');
  if (row.request_hash !== hash) throw conflict('Idempotency-Key was already used with a different request; use a new key for a new request');
  return row.endpoint_id;
}
