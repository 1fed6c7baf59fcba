// Typed, prefixed ids (as Svix does): parsed once at the boundary, carried as branded strings after.
import { randomBytes } from 'node:crypto';

type Brand<T, B extends string> = T & { readonly __brand: B };
export type EndpointId = Brand<string, 'EndpointId'>;
export type TenantId = Brand<string, 'TenantId'>;

// Base32 (Crockford alphabet, lower case): URL-safe, no ambiguous letters, valid in NATS subject tokens.
const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

/** Random bytes drawn a few thousand at a time: every API request takes an id (its request id). */
let pool = Buffer.alloc(0);
let poolAt = 0;

/** A time-ordered unique id body: 48-bit milliseconds then 80 random bits, 26 characters. */
export function newIdBody(now = Date.now()): string {
  const bytes = Buffer.alloc(16);
  bytes.writeUIntBE(now, 0, 6);
  if (poolAt + 10 > pool.length) { pool = randomBytes(4000); poolAt = 0; }
  pool.copy(bytes, 6, poolAt, (poolAt += 10));
  // The 128 bits, most significant first, as 26 characters of 5 bits (the first with two leading zeros).
  let out = '';
  for (let i = 0; i < 26; i++) {
    let v = 0;
    for (let bit = i * 5 - 2; bit < i * 5 + 3; bit++) v = (v << 1) | (bit < 0 ? 0 : (bytes[bit >> 3]! >> (7 - (bit & 7))) & 1);
    out += ALPHABET[v];
  }
  return out;
}

const ENDPOINT_ID = /^webhook_[0-9a-z]{1,64}$/;
// Tenant ids become one NATS subject token, so no dots, wildcards or white space.
const TENANT_ID = /^[A-Za-z0-9_-]{1,64}$/;

export const newEndpointId = (): EndpointId => `webhook_${newIdBody()}` as EndpointId;

export const isEndpointId = (s: unknown): s is EndpointId => typeof s === 'string' && ENDPOINT_ID.test(s);
export const isTenantId = (s: unknown): s is TenantId => typeof s === 'string' && TENANT_ID.test(s);

// Webhook ids are made and read in one place; their format and check live there.
export { isMessageId, type MessageId } from './webhook-id.ts';

export const TENANT_ID_RULE = '1-64 characters of A-Z, a-z, 0-9, _ or -';
