// Webhook ids: one per EVENTS message, `msg_` + 26 base-32 characters of one AES-128 block holding a
// time (ms) and the message's stream sequence. The time is EVENTS' creation time (streams/events.ts,
// eventsEpochMs), so a consumer of a copy of the event names it as the router does; ids made before
// that hold the event's own stored time, and both are read. A keyed permutation: the same message always
// gets the same id (every retry, replay and re-routing), the admin role can turn an id back into the
// message, and without the key an id tells nothing (the sequence is global, so plain ids let any tenant count every
// tenant's events). The key is derived from the master key; this module only takes the bytes.
import { createCipheriv, createDecipheriv } from 'node:crypto';
import { deriveSubkey } from '../crypto/subkey.ts';

/** A webhook-id (`msg_…`) of either format below, parsed once at the boundary. */
export type MessageId = string & { readonly __brand: 'MessageId' };

export interface WebhookIdParts {
  /** EVENTS stream sequence. */
  seq: number;
  /** EVENTS' creation time (or, in ids made before, the message's stored time), milliseconds since the epoch. */
  ms: number;
}

export interface WebhookIdCodec {
  encode(parts: WebhookIdParts): MessageId;
  /** The parts of a current or legacy id; undefined for anything else (including ids made under another key). */
  decode(id: string): WebhookIdParts | undefined;
}

/** HKDF info: a new purpose or format gets a new label, never the same key. */
const KEY_INFO = 'hookstream webhook-id v1';

/** The 16-byte webhook-id key for a 32-byte master key. */
export function deriveWebhookIdKey(masterKey: Uint8Array): Buffer {
  return deriveSubkey(masterKey, KEY_INFO, 16);
}

// Crockford base 32, lower case, as the other ids (src/domain/ids.ts): valid in NATS subjects and headers.
const ALPHABET = '0123456789abcdefghjkmnpqrstvwxyz';
const DIGIT = new Map([...ALPHABET].map((c, i) => [c, i]));
// 26 characters hold 130 bits: the first carries the block's top 3 bits only.
const CURRENT = /^msg_[0-7][0-9a-hjkmnp-tv-z]{25}$/;
/** Before opaque ids: 9 base-36 digits of milliseconds then 8 of sequence. Old dead letters and attempt records carry them. */
const LEGACY = /^msg_([0-9a-z]{9})([0-9a-z]{8})$/;

/**
 * A webhook-id of the current format from 26 random bytes, for a delivery in no EVENTS message (a test
 * event): unique, and decoded to no message (but with probability 2^-27, which the EVENTS check catches).
 */
export const randomWebhookId = (bytes: Uint8Array): MessageId =>
  `msg_${[...bytes.subarray(0, 26)].map((b, i) => ALPHABET[b & (i === 0 ? 7 : 31)]).join('')}` as MessageId;

/** Exactly the ids encode() makes and decode() reads the format of (current or legacy). */
export const isMessageId = (s: unknown): s is MessageId => typeof s === 'string' && (CURRENT.test(s) || LEGACY.test(s));

// 2^48 ms is the year 10889: a decrypted block above it (or a sequence of 0 or above 2^53) was not made
// under this key. Random blocks pass both with probability 2^-27; the admin role then also compares the
// time with the EVENTS message it points at.
const MAX_MS = 2n ** 48n;
const MAX_SEQ = BigInt(Number.MAX_SAFE_INTEGER);

function toBase32(block: Buffer): string {
  // Two leading zero bits make 130, a multiple of 5; read 5 at a time from the most significant end.
  let out = '';
  let acc = 0;
  let bits = 2;
  for (const byte of block) {
    acc = ((acc << 8) | byte) & 0xfff;
    bits += 8;
    while (bits >= 5) {
      bits -= 5;
      out += ALPHABET[(acc >> bits) & 31];
    }
  }
  return out;
}

function fromBase32(text: string): Buffer {
  const block = Buffer.alloc(16);
  let acc = 0;
  let bits = -2; // the two padding bits are dropped
  let i = 0;
  for (const c of text) {
    acc = ((acc << 5) | DIGIT.get(c)!) & 0xfff;
    bits += 5;
    if (bits >= 8) {
      bits -= 8;
      block[i++] = (acc >> bits) & 0xff;
    }
  }
  return block;
}

// One block, no IV, no padding: ECB on a single block is the raw AES permutation, which is what a
// deterministic, reversible id needs. Without padding every 16-byte update() returns its block at
// once, so one cipher object serves every call (a new one per id cost ~35 µs, on the router's path).
function aesBlock(key: Uint8Array, decrypt: boolean): (block: Buffer) => Buffer {
  const c = decrypt ? createDecipheriv('aes-128-ecb', key, null) : createCipheriv('aes-128-ecb', key, null);
  c.setAutoPadding(false);
  return (block) => c.update(block);
}

export function decodeLegacyWebhookId(id: string): WebhookIdParts | undefined {
  const m = LEGACY.exec(id);
  if (!m) return undefined;
  return { ms: parseInt(m[1]!, 36), seq: parseInt(m[2]!, 36) };
}

/**
 * A codec under `key` (16 bytes, see deriveWebhookIdKey). `previousKeys` decode ids made before a master
 * key rotation; encoding always uses `key`.
 */
export function createWebhookIdCodec(key: Uint8Array, previousKeys: readonly Uint8Array[] = []): WebhookIdCodec {
  for (const k of [key, ...previousKeys]) if (k.length !== 16) throw new Error('a webhook-id key is 16 bytes');
  const encrypt = aesBlock(key, false);
  const decrypts = [key, ...previousKeys].map((k) => aesBlock(k, true));
  return {
    encode({ seq, ms }) {
      if (!Number.isSafeInteger(seq) || seq < 1 || !Number.isSafeInteger(ms) || ms < 0 || BigInt(ms) >= MAX_MS) {
        throw new RangeError(`no webhook-id for seq ${seq} at ${ms} ms`);
      }
      const block = Buffer.alloc(16);
      block.writeBigUInt64BE(BigInt(ms), 0);
      block.writeBigUInt64BE(BigInt(seq), 8);
      return `msg_${toBase32(encrypt(block))}` as MessageId;
    },
    decode(id) {
      if (!CURRENT.test(id)) return decodeLegacyWebhookId(id);
      const sealed = fromBase32(id.slice(4));
      for (const decrypt of decrypts) {
        const block = decrypt(sealed);
        const ms = block.readBigUInt64BE(0);
        const seq = block.readBigUInt64BE(8);
        if (ms < MAX_MS && seq >= 1n && seq <= MAX_SEQ) return { ms: Number(ms), seq: Number(seq) };
      }
      return undefined;
    },
  };
}
