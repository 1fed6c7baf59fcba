// Our signatures against the Standard Webhooks test vector and the reference verifier (the
// `standardwebhooks` npm package): if a receiver's off-the-shelf library rejects us, nothing else matters.
import test from 'ava';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { isSigningSecret, newSigningSecret, sign, signatureHeader, signingKey, signingKeyObject, verifySignature } from '../src/domain/signature.ts';

// From standard-webhooks/standard-webhooks libraries/javascript/src/webhook.test.ts ("sign function works").
const VECTOR = {
  secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
  msgId: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
  timestamp: 1614265330,
  payload: '{"test": 2432232314}',
  signature: 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
};

const now = () => Math.floor(Date.now() / 1000);

function headers(msgId: string, timestamp: number, signature: string): Record<string, string> {
  return { 'webhook-id': msgId, 'webhook-timestamp': String(timestamp), 'webhook-signature': signature };
}

/** Whether the reference verifier accepts a delivery (it throws when it does not). */
function referenceAccepts(secret: string, body: string, h: Record<string, string>): boolean {
  try {
    new Webhook(secret).verify(body, h);
    return true;
  } catch (e) {
    if (e instanceof WebhookVerificationError) return false;
    throw e;
  }
}

test('the published test vector reproduces exactly', (t) => {
  const { secret, msgId, timestamp, payload, signature } = VECTOR;
  t.is(sign(signingKey(secret), msgId, timestamp, payload), signature);
  t.is(sign(signingKey(secret), msgId, timestamp, Buffer.from(payload)), signature);
  t.is(signatureHeader([signingKey(secret)], msgId, timestamp, payload), signature);
  // The reference library agrees, so the vector is what we think it is.
  t.is(new Webhook(secret).sign(msgId, new Date(timestamp * 1000), payload), signature);
});

test('the whsec_ prefix is optional when decoding a key, as in the reference', (t) => {
  t.deepEqual(signingKey(VECTOR.secret), signingKey(VECTOR.secret.slice('whsec_'.length)));
  t.is(signingKey(VECTOR.secret).length, 24);
});

test('verifySignature accepts the test vector and rejects it altered', (t) => {
  const { secret, msgId, timestamp, payload, signature } = VECTOR;
  t.true(verifySignature(secret, signature, msgId, timestamp, payload));
  t.false(verifySignature(secret, signature, msgId, timestamp, payload.replace('2432232314', '2432232315')));
  t.false(verifySignature(secret, signature, msgId, timestamp + 1, payload));
  t.false(verifySignature(secret, signature, 'msg_p5jXN8AQM9LWM0D4loKWxJeK', timestamp, payload));
  t.false(verifySignature(newSigningSecret(), signature, msgId, timestamp, payload));
});

test('the reference verifier accepts our signature and headers with a fresh timestamp', (t) => {
  const secret = newSigningSecret();
  const body = JSON.stringify({ type: 'user.created', data: { userId: 'user_123' } });
  const ts = now();
  const h = headers('msg_01abc', ts, signatureHeader([signingKey(secret)], 'msg_01abc', ts, body));
  t.deepEqual(new Webhook(secret).verify(body, h), { type: 'user.created', data: { userId: 'user_123' } });
});

test('the reference verifier rejects a tampered body, id or timestamp', (t) => {
  const secret = newSigningSecret();
  const body = JSON.stringify({ type: 'organization.updated', data: { id: 'org_1' } });
  const ts = now();
  const sig = signatureHeader([signingKey(secret)], 'msg_1', ts, body);
  t.true(referenceAccepts(secret, body, headers('msg_1', ts, sig)));
  t.false(referenceAccepts(secret, body.replace('org_1', 'org_2'), headers('msg_1', ts, sig)));
  t.false(referenceAccepts(secret, body, headers('msg_2', ts, sig)));
  t.false(referenceAccepts(secret, body, headers('msg_1', ts - 1, sig)));
  t.throws(() => new Webhook(secret).verify(body + ' ', headers('msg_1', ts, sig)), { instanceOf: WebhookVerificationError });
});

test('a rotation header (new and old signatures) verifies with either secret and not with a third', (t) => {
  const fresh = newSigningSecret();
  const old = newSigningSecret();
  const body = '{"type":"user.deleted","data":{}}';
  const ts = now();
  const header = signatureHeader([signingKey(fresh), signingKey(old)], 'msg_rot', ts, body);
  t.is(header.split(' ').length, 2);
  t.true(header.split(' ').every((s) => s.startsWith('v1,')));
  const h = headers('msg_rot', ts, header);
  t.true(referenceAccepts(fresh, body, h));
  t.true(referenceAccepts(old, body, h));
  t.false(referenceAccepts(newSigningSecret(), body, h));
  t.true(verifySignature(fresh, header, 'msg_rot', ts, body));
  t.true(verifySignature(old, header, 'msg_rot', ts, body));
  t.false(verifySignature(newSigningSecret(), header, 'msg_rot', ts, body));
});

test('verifySignature agrees with the reference verifier case by case', (t) => {
  const secret = newSigningSecret();
  const other = newSigningSecret();
  const body = '{"type":"connection.saml_certificate_renewed","data":{"connectionId":"conn_1"}}';
  const ts = now();
  const good = sign(signingKey(secret), 'msg_x', ts, body);
  const bad = sign(signingKey(other), 'msg_x', ts, body);
  const cases: { name: string; header: string; body: string }[] = [
    { name: 'correct', header: good, body },
    { name: 'wrong secret', header: bad, body },
    { name: 'tampered body', header: good, body: body.replace('conn_1', 'conn_2') },
    { name: 'bad then good', header: `${bad} ${good}`, body },
    { name: 'unknown version', header: good.replace('v1,', 'v2,'), body },
    { name: 'truncated', header: good.slice(0, -2), body },
    { name: 'bare v1,', header: 'v1,', body },
    { name: 'double space', header: `${bad}  ${good}`, body },
    { name: 'no version', header: good.slice(3), body },
  ];
  for (const c of cases) {
    t.is(verifySignature(secret, c.header, 'msg_x', ts, c.body), referenceAccepts(secret, c.body, headers('msg_x', ts, c.header)), c.name);
  }
  // The comparison above is only meaningful if both outcomes occur.
  t.true(verifySignature(secret, good, 'msg_x', ts, body));
  t.false(verifySignature(secret, bad, 'msg_x', ts, body));
});

test('new signing secrets are whsec_ with 32 random bytes and differ each time', (t) => {
  const a = newSigningSecret();
  const b = newSigningSecret();
  t.not(a, b);
  t.true(isSigningSecret(a));
  t.regex(a, /^whsec_[A-Za-z0-9+/]{43}=$/);
  t.is(signingKey(a).length, 32);
  t.true(isSigningSecret(VECTOR.secret));
  t.false(isSigningSecret(a.slice('whsec_'.length)));
  t.false(isSigningSecret('whsec_' + Buffer.alloc(16).toString('base64')));
  t.false(isSigningSecret('whsec_' + Buffer.alloc(65).toString('base64')));
});

test('a KeyObject from signingKeyObject signs exactly like the raw key', (t) => {
  const secret = newSigningSecret();
  const body = Buffer.from('{"type":"user.created","data":{}}');
  t.is(signatureHeader([signingKeyObject(secret)], 'msg_ko', 1_700_000_000, body), signatureHeader([signingKey(secret)], 'msg_ko', 1_700_000_000, body));
});
