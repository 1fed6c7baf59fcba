// `Idempotency-Key` on POST /v1/webhooks (issue 23), as Stripe and Svix have it: a create retried with the
// same key within 24 hours answers the first create's endpoint, signing secret included, instead of a
// second endpoint (or, after a publish timeout whose write was stored, a 500 and a secret lost for good).
// The key claims, in Postgres, the endpoint id its create uses; the create appends with "no event on this
// id yet", so of any number of tries exactly one creates and the others read that endpoint back.
//
// The other POSTs (restore, rotate-secret, portal sessions) have no id to claim: their key claims the
// request, and its first answer is stored, sealed under the master key (a new secret or a portal link is
// in it), and answered again to a retry. A request that fails leaves nothing: its retry runs again.
import { createHash } from 'node:crypto';
import type { RouterContext } from '@koa/router';
import type { EntityManager } from '@mikro-orm/postgresql';
import { newEndpointId, type EndpointId, type TenantId } from '../domain/ids.ts';
import type { SecretSealer } from '../crypto/sodium.ts';
import { badRequest, conflict, describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ApiState } from './state.ts';

export const IDEMPOTENCY_HEADER = 'idempotency-key';
/** Printable ASCII, as Stripe allows; a UUID or ULID is the usual choice. */
const KEY = /^[\x21-\x7e]{1,255}$/;
const WINDOW = "interval '24 hours'";
/** One claim in this many also removes expired keys. */
const SWEEP_EVERY = 100;
/** A claim with no answer this old is taken over: its request died (longer than any request takes). */
const ABANDONED = "interval '1 minute'";
const IN_PROGRESS = 'a request with this Idempotency-Key is still in progress; retry';
const OTHER_REQUEST = 'Idempotency-Key was already used with a different request; use a new key for a new request';

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
const sweep = async (em: EntityManager) => {
  if (++claims % SWEEP_EVERY === 0) await em.execute(`delete from idempotency_keys where created_at < now() - ${WINDOW}`);
};

/**
 * The endpoint id `key` stands for: a fresh one on its first use (or after 24 hours), the same one on a
 * retry of the same request; a 409 when the key was used with another request.
 */
export async function claimEndpointId(em: EntityManager, tenant: TenantId, key: string, hash: string): Promise<EndpointId> {
  await sweep(em);
  const [claimed] = await em.execute<{ endpoint_id: EndpointId | null; request_hash: string }[]>(`
    insert into idempotency_keys (tenant, key, request_hash, endpoint_id, created_at) values (?, ?, ?, ?, now())
    on conflict (tenant, key) do update set request_hash = excluded.request_hash, endpoint_id = excluded.endpoint_id, answer = null, created_at = now()
      where idempotency_keys.created_at < now() - ${WINDOW}
    returning endpoint_id, request_hash`, [tenant, key, hash, newEndpointId()]);
  const row = claimed ?? (await em.execute<{ endpoint_id: EndpointId | null; request_hash: string }[]>(
    'select endpoint_id, request_hash from idempotency_keys where tenant = ? and key = ?', [tenant, key]))[0];
  if (!row) throw conflict('Idempotency-Key is being claimed concurrently; retry');
  if (row.request_hash !== hash || row.endpoint_id === null) throw conflict(OTHER_REQUEST);
  return row.endpoint_id;
}

/** What a POST answers, stored for its retries. */
export interface Answer {
  status: number;
  body: unknown;
}

export interface AnswerOnceDeps {
  sealer: Pick<SecretSealer, 'seal' | 'open'>;
  log: Logger;
}

/** The additional data a stored answer is sealed with: it opens for its own tenant and key only. */
const sealedFor = (tenant: TenantId, key: string) => `idempotency:${JSON.stringify([tenant, key])}`;

/**
 * Answers `run()`'s answer; with an Idempotency-Key, a retry of the same request (`request`: the route and
 * its validated input) within 24 hours gets the first answer again (Idempotent-Replayed: true) and `run`
 * is not called again; the key with another request is a 409, as is a retry while the first still runs.
 */
export async function answerOnce(ctx: RouterContext<ApiState>, deps: AnswerOnceDeps, request: unknown, run: () => Promise<Answer>): Promise<void> {
  const key = idempotencyKey(ctx.headers[IDEMPOTENCY_HEADER]);
  const answer: Answer & { replayed?: true } = key === undefined ? await run() : await runOnce(ctx.state.em, deps, ctx.state.tenant, key, requestHash(request), run);
  if (answer.replayed) ctx.set('idempotent-replayed', 'true');
  ctx.status = answer.status;
  ctx.body = answer.body;
}

async function runOnce(
  em: EntityManager, deps: AnswerOnceDeps, tenant: TenantId, key: string, hash: string, run: () => Promise<Answer>,
): Promise<Answer & { replayed?: true }> {
  await sweep(em);
  const claimed = await em.execute<{ claimed: boolean }[]>(`
    insert into idempotency_keys (tenant, key, request_hash, endpoint_id, answer, created_at) values (?, ?, ?, null, null, now())
    on conflict (tenant, key) do update set request_hash = excluded.request_hash, endpoint_id = null, answer = null, created_at = now()
      where idempotency_keys.created_at < now() - ${WINDOW}
        or (idempotency_keys.answer is null and idempotency_keys.endpoint_id is null and idempotency_keys.created_at < now() - ${ABANDONED})
    returning true as claimed`, [tenant, key, hash]);
  if (claimed.length === 0) {
    const [row] = await em.execute<{ request_hash: string; answer: string | null }[]>(
      'select request_hash, answer from idempotency_keys where tenant = ? and key = ?', [tenant, key]);
    if (!row) throw conflict(IN_PROGRESS); // removed (expired) between the two statements
    if (row.request_hash !== hash) throw conflict(OTHER_REQUEST);
    if (row.answer === null) throw conflict(IN_PROGRESS);
    let opened: string;
    try {
      opened = deps.sealer.open(row.answer, sealedFor(tenant, key));
    } catch {
      throw conflict('the first answer under this Idempotency-Key no longer opens (the master key was rotated); use a new key');
    }
    return { ...(JSON.parse(opened) as Answer), replayed: true };
  }
  let answer: Answer;
  try {
    answer = await run();
  } catch (e) {
    // Refused (404, 409, 422) or failed: nothing to answer again, and the retry may succeed.
    await em.execute('delete from idempotency_keys where tenant = ? and key = ? and request_hash = ? and answer is null', [tenant, key, hash])
      .catch((d: unknown) => deps.log.warn('could not release an Idempotency-Key', { reason: describe(d) }));
    throw e;
  }
  try {
    // Never onto another request's claim (one that took this key over while this request ran past a minute).
    await em.execute('update idempotency_keys set answer = ? where tenant = ? and key = ? and request_hash = ? and answer is null',
      [deps.sealer.seal(JSON.stringify(answer), sealedFor(tenant, key)), tenant, key, hash]);
  } catch (e) {
    // The request is done and its answer (a secret shown once, say) goes out; a retry after a minute runs it again.
    deps.log.warn('could not store the answer of an Idempotency-Key', { reason: describe(e) });
  }
  return answer;
}
