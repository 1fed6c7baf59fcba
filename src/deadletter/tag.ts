// The authentication tag of a stored dead letter (issue 23). Anyone who can write `dead_letters` can seal
// a message (the sealing key is public by design), so the seal says nothing about who wrote a row. The tag
// does: HMAC-SHA256 under a key derived from the master key, which Postgres never holds, over the row's
// identity (endpoint, tenant, webhook-id, event) and the opened message. A forged row, a row moved to
// another endpoint or tenant, or two rows' sealed messages swapped, no longer verify. The opened message is
// tagged rather than the sealed bytes, so a dead-letter key-pair reseal leaves the tag valid; a master-key
// rotation needs `hookstream keys reseal-dead-letters` to tag again under the new key.
import { createHmac, timingSafeEqual } from 'node:crypto';
import { deriveSubkey } from '../crypto/subkey.ts';

const KEY_INFO = 'hookstream dead-letter tag v1';
const DOMAIN = 'hookstream.dead-letter.v1';
const TAG_BYTES = 32;

/** What a tag binds a sealed message to: the row that holds it. */
export interface DeadLetterIdentity {
  endpointId: string;
  tenant: string;
  webhookId: string;
  eventType: string;
}

/**
 * How a row's tag checks out: under the current master key's tag key, under the previous one (a reseal
 * tags it again), absent (a row stored before tags existed), or not at all (forged or altered).
 */
export type TagCheck = 'current' | 'previous' | 'missing' | 'invalid';

export interface DeadLetterTagger {
  tag(identity: DeadLetterIdentity, message: Uint8Array): Buffer;
  check(identity: DeadLetterIdentity, message: Uint8Array, tag: Uint8Array | null): TagCheck;
}

/** The tag key of a master key (HKDF-SHA256, its own label): never the master key itself. */
export function deriveDeadLetterTagKey(masterKey: Uint8Array): Buffer {
  return deriveSubkey(masterKey, KEY_INFO, 32);
}

/** Each field length-prefixed, so no two identities encode alike (`a`+`bc` is not `ab`+`c`). */
function mac(key: Uint8Array, id: DeadLetterIdentity, message: Uint8Array): Buffer {
  const h = createHmac('sha256', key);
  for (const field of [DOMAIN, id.endpointId, id.tenant, id.webhookId, id.eventType]) {
    const bytes = Buffer.from(field, 'utf8');
    const length = Buffer.alloc(4);
    length.writeUInt32BE(bytes.length);
    h.update(length).update(bytes);
  }
  return h.update(message).digest();
}

/** Tags under `key`; `previousKeys` (a master-key rotation) still verify. Keys stay in the closure. */
export function createDeadLetterTagger(key: Uint8Array, previousKeys: readonly Uint8Array[] = []): DeadLetterTagger {
  const equal = (a: Buffer, b: Uint8Array) => b.length === TAG_BYTES && timingSafeEqual(a, b);
  return {
    tag: (identity, message) => mac(key, identity, message),
    check(identity, message, tag) {
      if (tag === null || tag.length === 0) return 'missing';
      if (equal(mac(key, identity, message), tag)) return 'current';
      if (previousKeys.some((k) => equal(mac(k, identity, message), tag))) return 'previous';
      return 'invalid';
    },
  };
}

/** The tagger of a master key and, during a rotation, the previous one (base64, as configured). */
export function deadLetterTaggerOf(masterKeyB64: string, previousMasterKeyB64?: string): DeadLetterTagger {
  const key = (b64: string) => deriveDeadLetterTagKey(Buffer.from(b64, 'base64'));
  return createDeadLetterTagger(key(masterKeyB64), previousMasterKeyB64 === undefined ? [] : [key(previousMasterKeyB64)]);
}
