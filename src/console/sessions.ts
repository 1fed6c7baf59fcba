// Console sessions in Postgres (so any console instance serves them, and revoking an operator ends them):
// the cookie holds 32 random bytes, the table only their sha256. A session lasts SESSION_TTL_MS from
// sign-in, and only while its operator is not revoked. The CSRF token of a session is derived from its
// token, so forms need no stored state and a token from another session is worthless.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/postgresql';
import { isToken, newToken, tokenDigest as digest } from '../crypto/tokens.ts';

export const SESSION_TTL_MS = 8 * 3600_000;

export interface Session {
  token: string;
  operatorId: string;
  operatorName: string;
  expiresAt: Date;
}

export async function createSession(em: EntityManager, operator: { id: string; name: string }, now = new Date()): Promise<Session> {
  const token = newToken();
  const expiresAt = new Date(now.getTime() + SESSION_TTL_MS);
  // Expired sessions are removed as new ones begin: the table holds only live ones and a few stale.
  await em.execute('delete from console_sessions where expires_at < ?', [now]);
  await em.execute('insert into console_sessions (token_hash, operator_id, created_at, expires_at) values (?, ?, ?, ?)', [
    digest(token), operator.id, now, expiresAt,
  ]);
  return { token, operatorId: operator.id, operatorName: operator.name, expiresAt };
}

/** The live session of a cookie value: not expired, its operator not revoked. */
export async function findSession(em: EntityManager, token: string | undefined): Promise<Session | undefined> {
  if (!isToken(token)) return undefined;
  const [row] = await em.execute<{ operator_id: string; name: string; expires_at: Date | string }[]>(
    `select s.operator_id, o.name, s.expires_at from console_sessions s join operators o on o.id = s.operator_id
     where s.token_hash = ? and s.expires_at > now() and o.revoked_at is null`,
    [digest(token)],
  );
  return row ? { token, operatorId: row.operator_id, operatorName: row.name, expiresAt: new Date(row.expires_at) } : undefined;
}

export async function deleteSession(em: EntityManager, token: string): Promise<void> {
  await em.execute('delete from console_sessions where token_hash = ?', [digest(token)]);
}

/** The CSRF token of a secret (a session token, or the sign-in page's pre-session token). */
export const csrfTokenOf = (secret: string): string => createHmac('sha256', secret).update('hookstream-console-csrf').digest('base64url');

export function csrfMatches(secret: string, presented: unknown): boolean {
  if (typeof presented !== 'string') return false;
  const a = Buffer.from(csrfTokenOf(secret));
  const b = Buffer.from(presented);
  return a.length === b.length && timingSafeEqual(a, b);
}

