// The webhook-id codec (src/domain/webhook-id.ts) and the fan-out Nats-Msg-Id (src/router/dedupe.ts),
// without servers: round trips, legacy ids, ids under another key, garbage.
import test from 'ava';
import { randomBytes } from 'node:crypto';
import { createWebhookIdCodec, decodeLegacyWebhookId, deriveWebhookIdKey, randomWebhookId } from '../src/domain/webhook-id.ts';
import { isMessageId } from '../src/domain/ids.ts';
import { fanOutMsgId } from '../src/router/dedupe.ts';

const masterKey = randomBytes(32);
const codec = createWebhookIdCodec(deriveWebhookIdKey(masterKey));
const ms = Date.UTC(2026, 10, 22, 12, 0, 0, 123);
const CURRENT = /^msg_[0-9a-hjkmnp-tv-z]{26}$/;

test('an id decodes to the sequence and time it was made from, for small, large and extreme values', (t) => {
  for (const parts of [{ seq: 1, ms: 0 }, { seq: 4242, ms }, { seq: Number.MAX_SAFE_INTEGER, ms: 2 ** 48 - 1 }, { seq: 2 ** 32 + 7, ms }]) {
    const id = codec.encode(parts);
    t.regex(id, CURRENT);
    t.true(isMessageId(id), 'the domain accepts it as a message id');
    t.deepEqual(codec.decode(id), parts);
  }
});

test('deterministic per key: the same message gets the same id, from another codec instance too', (t) => {
  const again = createWebhookIdCodec(deriveWebhookIdKey(Buffer.from(masterKey)));
  t.is(again.encode({ seq: 77, ms }), codec.encode({ seq: 77, ms }));
  t.not(codec.encode({ seq: 78, ms }), codec.encode({ seq: 77, ms }));
  t.not(codec.encode({ seq: 77, ms: ms + 1 }), codec.encode({ seq: 77, ms }));
});

test('ids reveal nothing: consecutive sequences share no prefix, order or structure', (t) => {
  const ids = Array.from({ length: 64 }, (_, i) => codec.encode({ seq: 1000 + i, ms }));
  t.is(new Set(ids).size, 64);
  t.notDeepEqual([...ids].sort(), ids, 'not in sequence order');
  // Each character position takes many values across neighbouring ids (a counter would change only the tail).
  for (let pos = 5; pos < 30; pos++) t.true(new Set(ids.map((id) => id[pos])).size > 8, `position ${pos} varies`);
  t.is(decodeLegacyWebhookId(ids[0]!), undefined, 'not readable as the old format');
});

test('an id made under another key does not decode to its sequence', (t) => {
  const other = createWebhookIdCodec(deriveWebhookIdKey(randomBytes(32)));
  for (let seq = 1; seq <= 200; seq++) {
    const decoded = other.decode(codec.encode({ seq, ms }));
    t.false(decoded?.seq === seq && decoded.ms === ms);
  }
  // All 200 are rejected outright, bar a 2^-27 chance each.
  t.is(Array.from({ length: 200 }, (_, i) => other.decode(codec.encode({ seq: i + 1, ms }))).filter(Boolean).length, 0);
});

test('a codec with the previous key decodes ids made before a key rotation', (t) => {
  const oldKey = deriveWebhookIdKey(masterKey);
  const rotated = createWebhookIdCodec(deriveWebhookIdKey(randomBytes(32)), [oldKey]);
  const before = codec.encode({ seq: 9, ms });
  t.deepEqual(rotated.decode(before), { seq: 9, ms });
  t.not(rotated.encode({ seq: 9, ms }), before, 'new ids use the new key');
  t.deepEqual(rotated.decode(rotated.encode({ seq: 10, ms })), { seq: 10, ms });
});

test('legacy ids (base-36 time and sequence) still decode, with any codec', (t) => {
  const legacy = `msg_${ms.toString(36).padStart(9, '0')}${(4242).toString(36).padStart(8, '0')}`;
  t.true(isMessageId(legacy));
  t.deepEqual(codec.decode(legacy), { seq: 4242, ms });
  t.deepEqual(decodeLegacyWebhookId(legacy), { seq: 4242, ms });
  t.deepEqual(codec.decode('msg_0mws8dye300000004'), { seq: 4, ms: parseInt('0mws8dye3', 36) });
});

test('garbage is rejected', (t) => {
  const good = codec.encode({ seq: 5, ms });
  for (const bad of [
    '', 'msg_', 'msg_short', 'msg_x', good.slice(4), `${good}0`, good.slice(0, -1), good.toUpperCase(),
    `msg_8${good.slice(5)}`, // the first character carries 3 bits only
    `${good.slice(0, -1)}u`, // not in the alphabet
    `webhook_${good.slice(4)}`,
    'msg_0mws8dye30000000', // legacy, one digit short
  ]) t.is(codec.decode(bad), undefined, JSON.stringify(bad));
  t.throws(() => codec.encode({ seq: 0, ms }));
  t.throws(() => codec.encode({ seq: 1.5, ms }));
  t.throws(() => codec.encode({ seq: 1, ms: -1 }));
  t.throws(() => createWebhookIdCodec(randomBytes(32)), { message: /16 bytes/ });
});

test('the key is the HKDF of the master key for this purpose: 16 bytes, not the master key itself', (t) => {
  const key = deriveWebhookIdKey(masterKey);
  t.is(key.length, 16);
  t.false(masterKey.subarray(0, 16).equals(key));
  t.false(deriveWebhookIdKey(randomBytes(32)).equals(key));
});

test('fan-out Nats-Msg-Id: a producer id is scoped to its tenant; without one, the webhook-id', (t) => {
  const a = fanOutMsgId('tenant_a', 'order-1', 'msg_first', 'webhook_1');
  t.regex(a, /^[A-Za-z0-9_-]{22}\.webhook_1$/);
  t.is(fanOutMsgId('tenant_a', 'order-1', 'msg_second', 'webhook_1'), a, 'a retried publish (new webhook-id) maps to the same id');
  t.not(fanOutMsgId('tenant_b', 'order-1', 'msg_first', 'webhook_1'), a, 'another tenant with the same producer id');
  t.not(fanOutMsgId('tenant_a', 'order-2', 'msg_first', 'webhook_1'), a);
  t.not(fanOutMsgId('tenant_a', 'order-1', 'msg_first', 'webhook_2'), a);
  // The separator (never in a tenant id) keeps tenant and id apart: plain concatenation would make these equal.
  t.not(fanOutMsgId('tenant_a', 'x', 'msg_first', 'webhook_1'), fanOutMsgId('tenant_', 'ax', 'msg_first', 'webhook_1'));
  t.is(fanOutMsgId('tenant_a', undefined, 'msg_first', 'webhook_1'), 'msg_first.webhook_1');
});

test('a random webhook-id (test events) has the current format and names no message under the key', (t) => {
  const codec = createWebhookIdCodec(randomBytes(16));
  const ids = new Set(Array.from({ length: 100 }, () => randomWebhookId(randomBytes(26))));
  t.is(ids.size, 100);
  for (const id of ids) t.true(isMessageId(id), id);
  t.true([...ids].filter((id) => codec.decode(id) !== undefined).length <= 1);
});
