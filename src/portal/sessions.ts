// Tenant portal links and sessions (issue 19). A link is made for an API key's tenant (POST
// /v1/portal/sessions), lives LINK_TTL_MS and is redeemed once: the update that marks it used is the
// check, so two tabs racing for one link make one session. A session lives SESSION_TTL_MS and acts as
// the key that made it: it ends when that key is revoked. Only sha256 digests of the tokens are stored.
import type { EntityManager } from '@mikro-orm/postgresql';
import { isToken, newToken, tokenDigest as digest } from '../crypto/tokens.ts';
import type { ApiKeyId } from '../apikeys/key.ts';
import type { TenantId } from '../domain/ids.ts';

export const LINK_TTL_MS = 5 * 60_000;
export const PORTAL_SESSION_TTL_MS = 3600_000;

export interface PortalPrincipal {
  tenant: TenantId;
  keyId: ApiKeyId;
}

export interface PortalSessionInfo extends PortalPrincipal {
  token: string;
  expiresAt: Date;
}

async function insert(em: EntityManager, kind: 'link' | 'session', p: PortalPrincipal, ttlMs: number): Promise<{ token: string; expiresAt: Date }> {
  const token = newToken();
  const now = new Date();
  const expiresAt = new Date(now.getTime() + ttlMs);
  await em.execute('delete from portal_sessions where expires_at < ?', [new Date(now.getTime() - 3600_000)]);
  await em.execute('insert into portal_sessions (token_hash, kind, tenant, key_id, created_at, expires_at) values (?, ?, ?, ?, ?, ?)', [
    digest(token), kind, p.tenant, p.keyId, now, expiresAt,
  ]);
  return { token, expiresAt };
}

export const createPortalLink = (em: EntityManager, p: PortalPrincipal) => insert(em, 'link', p, LINK_TTL_MS);

/** A new session for an unused, unexpired link (marking it used), or undefined. */
export async function redeemPortalLink(em: EntityManager, token: string): Promise<PortalSessionInfo | undefined> {
  if (!isToken(token)) return undefined;
  const [row] = await em.execute<{ tenant: string; key_id: string }[]>(
    `update portal_sessions set used_at = now() where token_hash = ? and kind = 'link' and used_at is null and expires_at > now()
     returning tenant, key_id`,
    [digest(token)],
  );
  if (!row) return undefined;
  const principal = { tenant: row.tenant as TenantId, keyId: row.key_id as ApiKeyId };
  return { ...principal, ...(await insert(em, 'session', principal, PORTAL_SESSION_TTL_MS)) };
}

/** The live session of a cookie value, while the API key that made it is not revoked. */
export async function findPortalSession(em: EntityManager, token: string | undefined): Promise<PortalSessionInfo | undefined> {
  if (!isToken(token)) return undefined;
  const [row] = await em.execute<{ tenant: string; key_id: string; expires_at: Date | string }[]>(
    `select s.tenant, s.key_id, s.expires_at from portal_sessions s join api_keys k on k.id = s.key_id
     where s.token_hash = ? and s.kind = 'session' and s.expires_at > now() and k.revoked_at is null and k.tenant = s.tenant`,
    [digest(token)],
  );
  return row ? { token, tenant: row.tenant as TenantId, keyId: row.key_id as ApiKeyId, expiresAt: new Date(row.expires_at) } : undefined;
}
