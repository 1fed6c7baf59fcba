// Typed, prefixed ids (as Svix does): parsed once at the boundary, carried as branded strings after.
import { randomBytes } from 'node:crypto';

type Brand<T, B extends string> = T & { readonly __brand: B };
export type EndpointId = Brand<string, 'EndpointId'>;
export type TenantId = Brand<string, 'TenantId'>;

// Base32 (Crockford alphabet, lower case): URL-safe, no ambiguous letters, valid in NATS subject tokens.
const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';

/** A time-ordered unique id body: 48-bit milliseconds then 80 random bits, 26 characters. */
export function newIdBody(now = Date.now()): string {
  const bytes = Buffer.alloc(16);
  bytes.writeUIntBE(now, 0, 6);
  randomBytes(10).copy(bytes, 6);
  let bits = 0n;
  for (const b of bytes) bits = (bits << 8n) | BigInt(b);
  let out = '';
  for (let i = 0; i < 26; i++) {
    out = ALPHABET[Number(bits & 31n)] + out;
    bits >>= 5n;
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
