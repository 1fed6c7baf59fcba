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

/**
 * Keys being rotated out: optional, never generated, never in the development keys file. While set, what
 * was sealed under them still opens; `hookstream keys reseal-*` moves it to the current key.
 */
export const PreviousKeyVariable = {
  Master: 'HOOKSTREAM_PREVIOUS_MASTER_KEY',
  DeadLetterSecret: 'HOOKSTREAM_PREVIOUS_DEAD_LETTER_SECRET_KEY',
} as const;
export type PreviousKeyVariable = (typeof PreviousKeyVariable)[keyof typeof PreviousKeyVariable];

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
export function decodeKey(variable: KeyVariable | PreviousKeyVariable, value: string, source?: string): Uint8Array {
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

/** What a sealed secret opened to, and whether it is already in the current form. */
export interface OpenedSecret {
  plaintext: string;
  /** `v2:` under the current master key (bound to the endpoint): nothing for a reseal to do. */
  current: boolean;
}

/**
 * Seals endpoint signing secrets under the master key, so the database and the stream never hold them in
 * clear. A sealed value is bound to its endpoint (the id is AEAD additional data): copied into another
 * endpoint's events it does not open there (issue 8).
 *
 * During a master-key rotation the previous key opens what was sealed under it; sealing always uses the
 * current key.
 */
export class SecretSealer {
  // Private fields keep the keys out of util.inspect and JSON.stringify.
  readonly #key: Uint8Array;
  readonly #previous: Uint8Array | undefined;

  constructor(masterKeyB64: string, previousMasterKeyB64?: string) {
    assertReady();
    this.#key = decodeKey(KeyVariable.Master, masterKeyB64);
    this.#previous = previousMasterKeyB64 === undefined ? undefined : decodeKey(PreviousKeyVariable.Master, previousMasterKeyB64);
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
   * secret is rotated or resealed.
   */
  open(sealed: string, endpointId: string): string {
    return this.openWithOrigin(sealed, endpointId).plaintext;
  }

  /** Like open(), and says whether the value is already what seal() makes now (`hookstream keys reseal-secrets`). */
  openWithOrigin(sealed: string, endpointId: string): OpenedSecret {
    const bound = sealed.startsWith(BOUND_PREFIX);
    const bytes = bound ? sealedBytes(sealed.slice(BOUND_PREFIX.length), AEAD_NONCE_BYTES + AEAD_TAG_BYTES) : sealedBytes(sealed, NONCE_BYTES + MAC_BYTES);
    const tryKey = (key: Uint8Array) => (bound ? openBound(bytes, endpointId, key) : openLegacy(bytes, key));
    let plain = tryKey(this.#key);
    if (plain !== undefined) return { plaintext: plain, current: bound };
    if (this.#previous) {
      plain = tryKey(this.#previous);
      if (plain !== undefined) return { plaintext: plain, current: false };
    }
    const keys = this.#previous ? `${KeyVariable.Master} or ${PreviousKeyVariable.Master}` : KeyVariable.Master;
    throw new DecryptionError(bound
      ? `sealed secret does not open for this endpoint under ${keys} (another endpoint's value, wrong key or corrupted data)`
      : `sealed secret does not open under ${keys} (wrong key or corrupted data)`);
  }
}

function sealedBytes(text: string, minimum: number): Uint8Array {
  const bytes = BASE64.test(text) ? new Uint8Array(Buffer.from(text, 'base64')) : undefined;
  if (!bytes || bytes.length < minimum) throw new DecryptionError('sealed secret is malformed');
  return bytes;
}

/** The plaintext, or undefined when the value does not open under `key` for this endpoint. */
function openBound(bytes: Uint8Array, endpointId: string, key: Uint8Array): string | undefined {
  try {
    return sodium.to_string(sodium.crypto_aead_xchacha20poly1305_ietf_decrypt(
      null, bytes.subarray(AEAD_NONCE_BYTES), sodium.from_string(endpointId), bytes.subarray(0, AEAD_NONCE_BYTES), key,
    ));
  } catch {
    return undefined;
  }
}

function openLegacy(bytes: Uint8Array, key: Uint8Array): string | undefined {
  try {
    return sodium.to_string(sodium.crypto_secretbox_open_easy(bytes.subarray(NONCE_BYTES), bytes.subarray(0, NONCE_BYTES), key));
  } catch {
    return undefined;
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

/** The X25519 public key of a dead-letter secret key, so an operator configures one variable, not two that must match. */
export function deadLetterPublicKeyOf(secretKeyB64: string, variable: KeyVariable | PreviousKeyVariable = KeyVariable.DeadLetterSecret): string {
  assertReady();
  return toBase64(sodium.crypto_scalarmult_base(decodeKey(variable, secretKeyB64)));
}

export interface OpenedDeadLetter {
  bytes: Uint8Array;
  /** Opened with the previous secret key: `hookstream keys reseal-dead-letters` seals it again. */
  previous: boolean;
}

/**
 * Opens dead letters with the current secret key and, during a rotation, the previous one. Keys are kept
 * as bytes in a closure: nothing to inspect or serialise.
 */
export function createDeadLetterKeyring(secretKeyB64: string, previousSecretKeyB64?: string): { open(sealed: Uint8Array): OpenedDeadLetter } {
  assertReady();
  const pair = (variable: KeyVariable | PreviousKeyVariable, b64: string) => {
    const secretKey = decodeKey(variable, b64);
    return { secretKey, publicKey: sodium.crypto_scalarmult_base(secretKey) };
  };
  const current = pair(KeyVariable.DeadLetterSecret, secretKeyB64);
  const previous = previousSecretKeyB64 === undefined ? undefined : pair(PreviousKeyVariable.DeadLetterSecret, previousSecretKeyB64);
  const tryOpen = (sealed: Uint8Array, keys: { secretKey: Uint8Array; publicKey: Uint8Array }): Uint8Array | undefined => {
    try {
      return sodium.crypto_box_seal_open(sealed, keys.publicKey, keys.secretKey);
    } catch {
      return undefined;
    }
  };
  return {
    open(sealed) {
      const bytes = tryOpen(sealed, current);
      if (bytes) return { bytes, previous: false };
      const old = previous ? tryOpen(sealed, previous) : undefined;
      if (old) return { bytes: old, previous: true };
      const keys = previous ? `${KeyVariable.DeadLetterSecret} or ${PreviousKeyVariable.DeadLetterSecret}` : KeyVariable.DeadLetterSecret;
      throw new DecryptionError(`dead letter does not open under ${keys} (wrong key pair or corrupted data)`);
    },
  };
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
