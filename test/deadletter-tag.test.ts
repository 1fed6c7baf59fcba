// The dead-letter authentication tag (issue 23): bound to every field of the row's identity and to the
// message, unambiguous across field boundaries, checked under the current and the previous master key.
import test from 'ava';
import { randomBytes } from 'node:crypto';
import { createDeadLetterTagger, deriveDeadLetterTagKey, type DeadLetterIdentity } from '../src/deadletter/tag.ts';
import { deriveWebhookIdKey } from '../src/domain/webhook-id.ts';

const id: DeadLetterIdentity = { endpointId: 'webhook_a', tenant: 'tenant_1', webhookId: 'msg_1', eventType: 'user.updated' };
const message = new TextEncoder().encode('{"v":1}');

test('a tag verifies only its own identity and message', (t) => {
  const tagger = createDeadLetterTagger(deriveDeadLetterTagKey(randomBytes(32)));
  const tag = tagger.tag(id, message);
  t.is(tagger.check(id, message, tag), 'current');
  for (const changed of [{ endpointId: 'webhook_b' }, { tenant: 'tenant_2' }, { webhookId: 'msg_2' }, { eventType: 'user.deleted' }]) {
    t.is(tagger.check({ ...id, ...changed }, message, tag), 'invalid', JSON.stringify(changed));
  }
  t.is(tagger.check(id, new TextEncoder().encode('{"v":2}'), tag), 'invalid');
  // Moving a character across a field boundary is another identity.
  t.is(tagger.check({ ...id, endpointId: 'webhook_at', tenant: 'enant_1' }, message, tagger.tag({ ...id, tenant: 'tenant_1' }, message)), 'invalid');
  t.is(tagger.check(id, message, null), 'missing');
  t.is(tagger.check(id, message, new Uint8Array(0)), 'missing');
  t.is(tagger.check(id, message, tag.subarray(0, 16)), 'invalid', 'a short tag');
  t.is(tagger.check(id, message, randomBytes(32)), 'invalid');
});

test('a master-key rotation: tags under the previous key check as previous; another key\'s do not', (t) => {
  const k1 = randomBytes(32);
  const k2 = randomBytes(32);
  const old = createDeadLetterTagger(deriveDeadLetterTagKey(k1)).tag(id, message);
  const rotating = createDeadLetterTagger(deriveDeadLetterTagKey(k2), [deriveDeadLetterTagKey(k1)]);
  t.is(rotating.check(id, message, old), 'previous');
  t.is(rotating.check(id, message, rotating.tag(id, message)), 'current');
  t.is(createDeadLetterTagger(deriveDeadLetterTagKey(k2)).check(id, message, old), 'invalid');
});

test('the tag key is neither the master key nor the webhook-id key', (t) => {
  const master = randomBytes(32);
  const key = deriveDeadLetterTagKey(master);
  t.false(key.equals(master));
  t.false(key.subarray(0, 16).equals(deriveWebhookIdKey(master)));
});
