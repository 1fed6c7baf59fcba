// Bearer tokens of browser sessions and single-use links (console, portal): 32 random bytes in base64url,
// of which the database keeps only the sha256, so a copy of the table opens no session.
import { createHash, randomBytes } from 'node:crypto';

const TOKEN_SHAPE = /^[A-Za-z0-9_-]{43}$/;

export const newToken = (): string => randomBytes(32).toString('base64url');
export const isToken = (s: string | undefined): s is string => s !== undefined && TOKEN_SHAPE.test(s);
/** What the database holds of a token. */
export const tokenDigest = (token: string): string => createHash('sha256').update(token, 'utf8').digest('hex');
