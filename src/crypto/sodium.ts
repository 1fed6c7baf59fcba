// libsodium for the two things the service keeps secret at rest: signing secrets (an AEAD under the
// master key, bound to their endpoint) and dead letters (sealed boxes, so delivery workers can seal but
// only the admin can open).
// Keys travel as standard base64. Errors name the environment variable, never its value.
import sodium from 'libsodium-wrappers';
import { ConfigError, ErrorCode, HookstreamError } from '../errors.ts';

export const KeyVariable = {
  Master: 'HOOKSTREAM_MASTER_KEY',
  DeadLetterPublic: 'HOOKSTREAM_DEAD_LETTER_PUBLIC_KEY',
  DeadLetterSecret: 'HOOKSTREAM_DEAD_LETTER_SECRET_KEY',
} as const;
export type KeyVariable = (typeof KeyVariable)[keyof typeof KeyVariable];

// libsodium's sizes, fixed by the algorithms (XSalsa20-Poly1305, X25519); constants so that keys can be
// checked before sodium.ready.
const KEY_BYTES = 32;
const NONCE_BYTES = 24;
const MAC_BYTES = 16;

let ready = false;

/** Load the WebAssembly module; everything else here needs it. Safe to call more than once. */
export async function initSodium(): Promise<void> {
  await sodium.ready;
  ready = true;
}

function assertReady(): void {
  if (!ready) throw new Error('libsodium is not initialised: await initSodium() first');
}

/** A sealed value does not open: wrong key or corrupted data. The message never carries key material. */
export class DecryptionError extends HookstreamError {
  constructor(message: string) {
    super(ErrorCode.Internal, message);
    this.name = 'DecryptionError';
  }
}

export const isDecryptionError = (e: unknown): e is DecryptionError => e instanceof DecryptionError;

// Canonical, padded standard base64 only: Buffer's decoder silently skips bad characters, which would
// turn a mistyped key into a different key instead of an error.
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

const toBase64 = (bytes: Uint8Array): string => Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('base64');

/**
 * The 32 key bytes a base64 key string stands for, or a ConfigError naming `variable`.
 * `source` says where the value came from when it was not the environment (e.g. the keys file).
 */
export function decodeKey(variable: KeyVariable, value: string, source?: string): Uint8Array {
  const from = source ? ` (from ${source})` : '';
  const text = value.trim();
  if (!BASE64.test(text)) {
    throw new ConfigError(variable, `value${from} is not standard base64; create keys with \`hookstream keys generate\``);
  }
  const bytes = new Uint8Array(Buffer.from(text, 'base64'));
  if (bytes.length !== KEY_BYTES) {
    throw new ConfigError(variable, `value${from} decodes to ${bytes.length} bytes, expected ${KEY_BYTES}; create keys with \`hookstream keys generate\``);
  }
  return bytes;
}

/** The sealed format since issue 8: XChaCha20-Poly1305 with the endpoint id as additional data. */
const BOUND_PREFIX = 'v2:';
const AEAD_NONCE_BYTES = 24;
const AEAD_TAG_BYTES = 16;

/**
 * Seals endpoint signing secrets under the master key, so the database and the stream never hold them in
 * clear. A sealed value is bound to its endpoint (the id is AEAD additional data): copied into another
 * endpoint's events it does not open there (issue 8).
 */
export class SecretSealer {
  // A private field keeps the key out of util.inspect and JSON.stringify.
  readonly #key: Uint8Array;

  constructor(masterKeyB64: string) {
    assertReady();
    this.#key = decodeKey(KeyVariable.Master, masterKeyB64);
  }

  /** `v2:` + base64(nonce || ciphertext and tag); a fresh random nonce every time. */
  seal(plaintext: string, endpointId: string): string {
    const nonce = sodium.randombytes_buf(AEAD_NONCE_BYTES);
    const box = sodium.crypto_aead_xchacha20poly1305_ietf_encrypt(sodium.from_string(plaintext), sodium.from_string(endpointId), null, nonce, this.#key);
    const out = new Uint8Array(nonce.length + box.length);
    out.set(nonce);
    out.set(box, nonce.length);
    return BOUND_PREFIX + toBase64(out);
  }

  /**
   * The plaintext of a value sealed for `endpointId`. Values sealed before issue 8 (plain base64 of a
   * secretbox, no prefix) carry no endpoint binding; they still open, for any id, until the endpoint's
   * secret is rotated.
   */
  open(sealed: string, endpointId: string): string {
    if (sealed.startsWith(BOUND_PREFIX)) return this.#openBound(sealed.slice(BOUND_PREFIX.length), endpointId);
    return this.#openLegacy(sealed);
  }

  #openBound(text: string, endpointId: string): string {
    const bytes = BASE64.test(text) ? new Uint8Array(Buffer.from(text, 'base64')) : undefined;
    if (!bytes || bytes.length < AEAD_NONCE_BYTES + AEAD_TAG_BYTES) throw new DecryptionError('sealed secret is malformed');
    let plain: Uint8Array;
    try {
      plain = sodium.crypto_aead_xchacha20poly1305_ietf_decrypt(
        null, bytes.subarray(AEAD_NONCE_BYTES), sodium.from_string(endpointId), bytes.subarray(0, AEAD_NONCE_BYTES), this.#key,
      );
    } catch {
      throw new DecryptionError(`sealed secret does not open for this endpoint under ${KeyVariable.Master} (another endpoint's value, wrong key or corrupted data)`);
    }
    return sodium.to_string(plain);
  }

  #openLegacy(sealed: string): string {
    const bytes = BASE64.test(sealed) ? new Uint8Array(Buffer.from(sealed, 'base64')) : undefined;
    if (!bytes || bytes.length < NONCE_BYTES + MAC_BYTES) {
      throw new DecryptionError('sealed secret is malformed');
    }
    let plain: Uint8Array;
    try {
      plain = sodium.crypto_secretbox_open_easy(bytes.subarray(NONCE_BYTES), bytes.subarray(0, NONCE_BYTES), this.#key);
    } catch {
      throw new DecryptionError(`sealed secret does not open under ${KeyVariable.Master} (wrong key or corrupted data)`);
    }
    return sodium.to_string(plain);
  }
}

/** Seal a dead letter so that only the holder of the dead-letter secret key can read it. */
export function sealForDeadLetters(publicKeyB64: string, bytes: Uint8Array): Uint8Array {
  assertReady();
  return sodium.crypto_box_seal(bytes, decodeKey(KeyVariable.DeadLetterPublic, publicKeyB64));
}

export function openDeadLetter(publicKeyB64: string, secretKeyB64: string, sealed: Uint8Array): Uint8Array {
  assertReady();
  const publicKey = decodeKey(KeyVariable.DeadLetterPublic, publicKeyB64);
  const secretKey = decodeKey(KeyVariable.DeadLetterSecret, secretKeyB64);
  try {
    return sodium.crypto_box_seal_open(sealed, publicKey, secretKey);
  } catch {
    throw new DecryptionError(`dead letter does not open under ${KeyVariable.DeadLetterSecret} (wrong key pair or corrupted data)`);
  }
}

/** Whether the secret key belongs to the public key (X25519: public = scalarmult_base(secret)). */
export function deadLetterKeysMatch(publicKeyB64: string, secretKeyB64: string): boolean {
  assertReady();
  const publicKey = decodeKey(KeyVariable.DeadLetterPublic, publicKeyB64);
  const derived = sodium.crypto_scalarmult_base(decodeKey(KeyVariable.DeadLetterSecret, secretKeyB64));
  return sodium.memcmp(derived, publicKey);
}

export interface GeneratedKeys {
  masterKey: string;
  deadLetterPublicKey: string;
  deadLetterSecretKey: string;
}

export function generateKeys(): GeneratedKeys {
  assertReady();
  const pair = sodium.crypto_box_keypair();
  return {
    masterKey: toBase64(sodium.crypto_secretbox_keygen()),
    deadLetterPublicKey: toBase64(pair.publicKey),
    deadLetterSecretKey: toBase64(pair.privateKey),
  };
}
