// What an API key is, apart from where it is stored: `hs_live_` + 32 random bytes in base64url. Only
// its sha256 is kept; the first characters (the prefix) are kept to tell keys apart in listings.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { newIdBody } from '../domain/ids.ts';

const KEY_PREFIX = 'hs_live_';
const KEY_SHAPE = /^hs_live_[A-Za-z0-9_-]{43}$/;
/** Shown in listings: the fixed prefix and four random characters, far too few to guess the rest. */
const SHOWN_CHARS = KEY_PREFIX.length + 4;

export type ApiKeyId = string & { readonly __brand: 'ApiKeyId' };

const API_KEY_ID = /^key_[0-9a-z]{26}$/;
export const isApiKeyId = (s: unknown): s is ApiKeyId => typeof s === 'string' && API_KEY_ID.test(s);
export const newApiKeyId = (): ApiKeyId => `key_${newIdBody()}` as ApiKeyId;

export interface NewKey {
  /** The key itself: shown once, never stored. */
  key: string;
  hash: Buffer;
  prefix: string;
}

/** The characters of a key that listings show (and that the failed-authentication throttle counts by). */
export const keyPrefix = (key: string): string => key.slice(0, SHOWN_CHARS);

export function generateKey(): NewKey {
  const key = KEY_PREFIX + randomBytes(32).toString('base64url');
  return { key, hash: hashKey(key), prefix: key.slice(0, SHOWN_CHARS) };
}

/** Whether a presented string could be a key at all; anything else is refused without a lookup. */
export const isWellFormedKey = (s: string): boolean => KEY_SHAPE.test(s);

export const hashKey = (key: string): Buffer => createHash('sha256').update(key, 'utf8').digest();

export function sameHash(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}
