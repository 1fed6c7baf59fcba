// Standard Webhooks signing: v1,<base64 HMAC-SHA256 of "id.timestamp.body">, keyed by the
// base64-decoded part of a whsec_ secret. Every Standard Webhooks verifier accepts it. And v1a (issue 11):
// v1a,<base64 ed25519 signature of the same bytes>, with a whsk_ key only hookstream holds and a whpk_
// public key receivers verify with.
import {
  createHmac, createPrivateKey, createPublicKey, createSecretKey, generateKeyPairSync, randomBytes,
  sign as cryptoSign, timingSafeEqual, verify as cryptoVerify, type KeyObject,
} from 'node:crypto';

/** The two Standard Webhooks schemes an endpoint can be signed with; fixed when it is created. */
export const SignatureScheme = { V1: 'v1', V1a: 'v1a' } as const;
export type SignatureScheme = (typeof SignatureScheme)[keyof typeof SignatureScheme];

export const isSignatureScheme = (x: unknown): x is SignatureScheme => x === SignatureScheme.V1 || x === SignatureScheme.V1a;

const PREFIX = 'whsec_';

export function newSigningSecret(): string {
  return PREFIX + randomBytes(32).toString('base64');
}

export function isSigningSecret(s: string): boolean {
  if (!s.startsWith(PREFIX)) return false;
  const key = Buffer.from(s.slice(PREFIX.length), 'base64');
  return key.length >= 24 && key.length <= 64;
}

/** The HMAC key a secret stands for; decode once per endpoint, not per delivery. */
export function signingKey(secret: string): Buffer {
  return Buffer.from(secret.startsWith(PREFIX) ? secret.slice(PREFIX.length) : secret, 'base64');
}

/**
 * The same key as a KeyObject, for signing many times: createHmac with a raw Buffer imports the key on
 * every call (~14 µs on the project's machine), with a KeyObject ~2 µs (issue 5).
 */
export function signingKeyObject(secret: string): KeyObject {
  return createSecretKey(signingKey(secret));
}

/** An HMAC key (a Buffer or a secret KeyObject: v1) or an ed25519 private KeyObject (v1a). */
export type SigningKey = Buffer | KeyObject;

export function sign(key: SigningKey, msgId: string, timestamp: number, body: string | Buffer): string {
  if (!Buffer.isBuffer(key) && key.type === 'private') {
    // ed25519 signs the whole message in one pass (no streaming API), so the prefix is joined to the body.
    const signature = cryptoSign(null, Buffer.concat([Buffer.from(`${msgId}.${timestamp}.`), Buffer.from(body)]), key);
    return `v1a,${signature.toString('base64')}`;
  }
  const mac = createHmac('sha256', key).update(`${msgId}.${timestamp}.`).update(body).digest('base64');
  return `v1,${mac}`;
}

/** The webhook-signature header: one signature per key, space-separated (rotation sends new and old). */
export function signatureHeader(keys: readonly SigningKey[], msgId: string, timestamp: number, body: string | Buffer): string {
  return keys.map((k) => sign(k, msgId, timestamp, body)).join(' ');
}

/** True when any v1 signature in the header matches. Used by the CLI's receiver and tests. */
export function verifySignature(secret: string, header: string, msgId: string, timestamp: number, body: string | Buffer): boolean {
  const expected = Buffer.from(sign(signingKey(secret), msgId, timestamp, body));
  return header.split(' ').some((candidate) => {
    const got = Buffer.from(candidate);
    return got.length === expected.length && timingSafeEqual(got, expected);
  });
}

// ---- v1a: ed25519 ----

const SECRET_KEY_PREFIX = 'whsk_';
const PUBLIC_KEY_PREFIX = 'whpk_';
const ED25519_KEY_BYTES = 32;
// DER framing of a raw ed25519 key (RFC 8410): PKCS#8 for the 32-byte seed, SPKI for the public key.
const PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
const SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');

export interface Ed25519KeyPair {
  /** `whsk_` + base64 of the 32-byte seed, as the Standard Webhooks reference (Go: ed25519.NewKeyFromSeed) reads it. */
  secretKey: string;
  /** `whpk_` + base64 of the 32-byte public key. */
  publicKey: string;
}

export function newEd25519KeyPair(): Ed25519KeyPair {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const seed = privateKey.export({ format: 'der', type: 'pkcs8' }).subarray(PKCS8_PREFIX.length);
  const raw = publicKey.export({ format: 'der', type: 'spki' }).subarray(SPKI_PREFIX.length);
  return { secretKey: SECRET_KEY_PREFIX + seed.toString('base64'), publicKey: PUBLIC_KEY_PREFIX + raw.toString('base64') };
}

/**
 * The signing KeyObject of a whsk_ key (prefix optional). 32 bytes are the seed; 64 bytes are a
 * tweetnacl/libsodium secret key (seed || public key), whose first half is the seed.
 */
export function ed25519SigningKey(secretKey: string): KeyObject {
  const bytes = Buffer.from(secretKey.startsWith(SECRET_KEY_PREFIX) ? secretKey.slice(SECRET_KEY_PREFIX.length) : secretKey, 'base64');
  if (bytes.length !== ED25519_KEY_BYTES && bytes.length !== 2 * ED25519_KEY_BYTES) {
    throw new Error(`an ed25519 signing key decodes to 32 or 64 bytes, not ${bytes.length}`);
  }
  return createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, bytes.subarray(0, ED25519_KEY_BYTES)]), format: 'der', type: 'pkcs8' });
}

/** The whpk_ public key of a whsk_ key. */
export function ed25519PublicKeyOf(secretKey: string): string {
  const raw = createPublicKey(ed25519SigningKey(secretKey)).export({ format: 'der', type: 'spki' }).subarray(SPKI_PREFIX.length);
  return PUBLIC_KEY_PREFIX + raw.toString('base64');
}

export function isPublicKey(s: string): boolean {
  return s.startsWith(PUBLIC_KEY_PREFIX) && Buffer.from(s.slice(PUBLIC_KEY_PREFIX.length), 'base64').length === ED25519_KEY_BYTES;
}

/** The KeyObject of a whpk_ public key (prefix optional), for verifying many deliveries. */
export function ed25519VerifyKey(publicKey: string): KeyObject {
  const raw = Buffer.from(publicKey.startsWith(PUBLIC_KEY_PREFIX) ? publicKey.slice(PUBLIC_KEY_PREFIX.length) : publicKey, 'base64');
  if (raw.length !== ED25519_KEY_BYTES) throw new Error(`an ed25519 public key decodes to 32 bytes, not ${raw.length}`);
  return createPublicKey({ key: Buffer.concat([SPKI_PREFIX, raw]), format: 'der', type: 'spki' });
}

/** True when any v1a signature in the header verifies under the public key. Used by the CLI's receiver and tests. */
export function verifySignatureV1a(publicKey: string | KeyObject, header: string, msgId: string, timestamp: number, body: string | Buffer): boolean {
  const key = typeof publicKey === 'string' ? ed25519VerifyKey(publicKey) : publicKey;
  const message = Buffer.concat([Buffer.from(`${msgId}.${timestamp}.`), Buffer.from(body)]);
  return header.split(' ').some((candidate) => {
    if (!candidate.startsWith('v1a,')) return false;
    const signature = Buffer.from(candidate.slice(4), 'base64');
    return signature.length === 64 && cryptoVerify(null, message, key, signature);
  });
}

/** The signing key of an endpoint's opened secret under its scheme: what the delivery role caches. */
export function signingKeyFor(scheme: SignatureScheme, secret: string): KeyObject {
  return scheme === SignatureScheme.V1a ? ed25519SigningKey(secret) : signingKeyObject(secret);
}
