// The ordering key of an event (issue 21): the events of one key reach an endpoint with `ordering: key`
// in the order they were published. The producer names it in a header; otherwise identity events are
// keyed by the user or the organization they are about.
import { createHash } from 'node:crypto';
import type { EventName } from './catalogue.ts';
import type { EventData } from './event-data.ts';

/** The producer's header naming an event's ordering key. */
export const ORDERING_KEY_HEADER = 'Hookstream-Ordering-Key';
export const MAX_ORDERING_KEY = 128;

/** 1-128 printable ASCII characters (space to tilde): it travels in a NATS header and in logs as is. */
const KEY_RULE = new RegExp(`^[\\x20-\\x7e]{1,${MAX_ORDERING_KEY}}$`);
export const isOrderingKey = (x: unknown): x is string => typeof x === 'string' && KEY_RULE.test(x);

export type OrderingKeyResult = { ok: true; key: string | undefined } | { ok: false; detail: string };

/** The data field that keys each family of identity events. */
function derivedField(type: EventName): string | undefined {
  if (type.startsWith('user.')) return 'userId';
  if (type.startsWith('organization.') || type.startsWith('organizationMembership.') || type.startsWith('organizationInvitation.')) return 'organizationId';
  return undefined;
}

/**
 * The key of an event: the header when the producer set one (an invalid one is the event's fault), else
 * data.userId / data.organizationId of identity events when that is a valid key, else none (unordered).
 */
export function orderingKeyOf(type: EventName, data: EventData, header: string | undefined): OrderingKeyResult {
  if (header !== undefined) {
    if (!isOrderingKey(header)) return { ok: false, detail: `${ORDERING_KEY_HEADER} must be 1-${MAX_ORDERING_KEY} printable ASCII characters` };
    return { ok: true, key: header };
  }
  const field = derivedField(type);
  const value = field === undefined ? undefined : data[field];
  return { ok: true, key: isOrderingKey(value) ? value : undefined };
}

const BASE32 = 'abcdefghijklmnopqrstuvwxyz234567';

/**
 * The subject token of (tenant, key): 26 base32 characters (130 bits) of SHA-256. Stable and unkeyed on
 * purpose: the delivery carries the key in plain anyway, and a keyed hash would move every key's
 * deliveries to new subjects at a master-key rotation, breaking their order.
 */
export function orderingToken(tenant: string, key: string): string {
  const digest = createHash('sha256').update(`${tenant}\n${key}`).digest();
  let out = '';
  let bits = 0;
  let value = 0;
  for (let i = 0; out.length < 26; i++) {
    value = (value << 8) | digest[i]!;
    bits += 8;
    while (bits >= 5 && out.length < 26) {
      bits -= 5;
      out += BASE32[(value >>> bits) & 31];
    }
    value &= (1 << bits) - 1;
  }
  return out;
}
