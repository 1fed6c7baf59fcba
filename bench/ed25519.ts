// `node bench/ed25519.ts`: ed25519 signing of one webhook (issue 11), tweetnacl against node:crypto, on
// this machine. The message is a typical delivery: "<msg id>.<timestamp>.<~300-byte body>". Each
// variant signs for a fixed time after a warm-up; the figure is the median of 5 rounds.
import { createPrivateKey, randomBytes, sign } from 'node:crypto';
import nacl from 'tweetnacl';

const ROUND_MS = 1000;
const ROUNDS = 5;

const seed = randomBytes(32);
const body = Buffer.from(JSON.stringify({ type: 'user.created', data: { userId: 'user_01j9', email: 'someone@example.com', attributes: 'x'.repeat(200) } }));
const message = Buffer.concat([Buffer.from(`msg_0mws8dye300000004.${Math.floor(Date.now() / 1000)}.`), body]);

// PKCS#8 DER of an ed25519 seed: a fixed 16-byte header, then the 32 bytes (RFC 8410).
const PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');
const keyObject = createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, seed]), format: 'der', type: 'pkcs8' });
const naclSecret = nacl.sign.keyPair.fromSeed(seed).secretKey;

const variants: Record<string, () => Uint8Array> = {
  'tweetnacl nacl.sign.detached': () => nacl.sign.detached(message, naclSecret),
  'node:crypto sign, cached KeyObject': () => sign(null, message, keyObject),
  'node:crypto sign, key imported per call': () =>
    sign(null, message, createPrivateKey({ key: Buffer.concat([PKCS8_PREFIX, seed]), format: 'der', type: 'pkcs8' })),
};

// Same bytes from both libraries, or the comparison means nothing.
if (!Buffer.from(variants['tweetnacl nacl.sign.detached']!()).equals(variants['node:crypto sign, cached KeyObject']!())) {
  throw new Error('tweetnacl and node:crypto disagree');
}

function round(fn: () => Uint8Array): number {
  let n = 0;
  const until = performance.now() + ROUND_MS;
  while (performance.now() < until) {
    for (let i = 0; i < 10; i++) fn();
    n += 10;
  }
  return (ROUND_MS * 1000) / n; // µs per signature
}

for (const [name, fn] of Object.entries(variants)) {
  round(fn); // warm-up
  const results = Array.from({ length: ROUNDS }, () => round(fn)).sort((a, b) => a - b);
  const median = results[Math.floor(ROUNDS / 2)]!;
  console.log(`${name.padEnd(42)} ${median.toFixed(1).padStart(8)} µs/signature  ${Math.round(1e6 / median).toLocaleString('en').padStart(8)}/s  (rounds ${results.map((r) => r.toFixed(1)).join(', ')})`);
}
