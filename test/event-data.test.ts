// What a producer publishes to events.<tenant>.<event name> and what parseEvent makes of it.
import test from 'ava';
import {
  DEFAULT_EVENT_LIMITS, encodeDelivery, jsonDepth, mayOutgrow, parseEvent, producerSubject, RejectionReason, type ParsedEvent,
} from '../src/domain/event-data.ts';

const body = (text: string) => new TextEncoder().encode(text);

function rejected(t: { fail(message?: string): void }, parsed: ParsedEvent): { reason: string; detail: string } {
  if (parsed.ok) {
    t.fail(`expected a rejection, got ${JSON.stringify(parsed)}`);
    return { reason: '', detail: '' };
  }
  return parsed;
}

test('dotted event names keep all their parts', (t) => {
  for (const type of ['organization.auth_policy.updated', 'organization.outbound_saml_app.created', 'organization.scim_target.deleted']) {
    t.deepEqual(parseEvent(`events.tenant_42.${type}`, body('{"organizationId":"org_1"}')),
      { ok: true, tenant: 'tenant_42', type, data: { organizationId: 'org_1' } });
  }
  t.deepEqual(parseEvent('events.t-1.organizationMembership.created', body('{}')),
    { ok: true, tenant: 't-1', type: 'organizationMembership.created', data: {} });
});

test('the data object passes through unchanged for events without stated rules', (t) => {
  const data = { nested: { list: [1, 'two', null], flag: true }, unicode: 'ünï ✓', n: 1.5 };
  const parsed = parseEvent('events.t1.connection.saml_certificate_renewed', body(JSON.stringify(data)));
  t.deepEqual(parsed, { ok: true, tenant: 't1', type: 'connection.saml_certificate_renewed', data });
});

test('a partition token after the tenant (the stored form of a partitioned EVENTS) is not part of the event', (t) => {
  t.deepEqual(parseEvent('events.t1.7.user.created', body('{"userId":"user_1"}')), { ok: true, tenant: 't1', type: 'user.created', data: { userId: 'user_1' } });
  t.deepEqual(parseEvent('events.42.15.organization.auth_policy.updated', body('{}')),
    { ok: true, tenant: '42', type: 'organization.auth_policy.updated', data: {} });
  // The producer's own subject, however it was stored: a digits-only tenant keeps its place.
  for (const [stored, published] of [
    ['events.t1.0.user.created', 'events.t1.user.created'],
    ['events.123.4.user.created', 'events.123.user.created'],
    ['events.t1.user.created', 'events.t1.user.created'],
    ['events.t1.4', 'events.t1.4'],
    ['events.t1.4x.user.created', 'events.t1.4x.user.created'],
    ['events.t1..user.created', 'events.t1..user.created'],
    ['events', 'events'],
    ['events.t1', 'events.t1'],
  ] as const) t.is(producerSubject(stored), published, stored);
  // Only one token is the partition: a second is part of the (unknown) event name.
  t.like(rejected(t, parseEvent('events.t1.3.5.user.created', body('{}'))), { reason: 'unknown_event' });
  t.like(rejected(t, parseEvent('events.t1.3', body('{}'))), { reason: 'unknown_event' });
});

const UNKNOWN = [
  'events.t1.user', 'events.t1.user.created.extra', 'events.t1.user.Created', 'events.t1.organization.auth_policy',
  'events.t1.organization.unknown', 'events.t1.organizationInvitation.deleted', 'events.t1.connection.created',
  'events.t1.user.*', 'events.t1.*', 'events.t1.organization.auth_policy.created', 'events.t1.membership.created',
];

for (const subject of UNKNOWN) {
  test(`${subject} is an unknown event`, (t) => {
    const r = rejected(t, parseEvent(subject, body('{"userId":"user_1"}')));
    t.is(r.reason, 'unknown_event');
    t.true(r.detail.includes(subject.slice('events.t1.'.length)));
  });
}

const BAD_SUBJECTS = ['events.t1', 'events', '', 'event.t1.user.created', 'EVENTS.t1.user.created', 'events..user.created', 'x.events.t1.user.created'];

for (const subject of BAD_SUBJECTS) {
  test(`subject ${JSON.stringify(subject)} is a bad subject`, (t) => {
    t.is(rejected(t, parseEvent(subject, body('{}'))).reason, 'bad_subject');
  });
}

const NOT_OBJECTS = ['[]', '[{"userId":"user_1"}]', 'null', '42', '"user_1"', 'true'];

for (const text of NOT_OBJECTS) {
  test(`body ${JSON.stringify(text)} is not a JSON object`, (t) => {
    t.is(rejected(t, parseEvent('events.t1.user.updated', body(text))).reason, 'not_an_object');
  });
}

const NOT_JSON = ['', 'not json', '{"userId":', '{} {}', '{"a":1,}', "{'a':1}"];

for (const text of NOT_JSON) {
  test(`body ${JSON.stringify(text)} is not JSON, and the detail does not quote it`, (t) => {
    const r = rejected(t, parseEvent('events.t1.user.updated', body(text)));
    t.is(r.reason, 'invalid_json');
    t.is(r.detail, 'body is not JSON');
  });
}

test('a body that is a view into a larger buffer is read from its own bytes only', (t) => {
  const whole = body('XXXX{"userId":"user_9"}YYYY');
  const view = whole.subarray(4, whole.length - 4);
  t.deepEqual(parseEvent('events.t1.user.created', view), { ok: true, tenant: 't1', type: 'user.created', data: { userId: 'user_9' } });
  t.deepEqual(parseEvent('events.t1.user.created', Buffer.from('{"userId":"user_8"}')),
    { ok: true, tenant: 't1', type: 'user.created', data: { userId: 'user_8' } });
});

const GOOD_USER_IDS = ['user_1', 'user_2a3B', 'user_01hx-yz_Q'];
const BAD_USER_DATA: Record<string, unknown>[] = [
  {}, { userId: null }, { userId: 42 }, { userId: '' }, { userId: 'user_' }, { userId: 'usr_1' }, { userId: 'USER_1' },
  { userId: '1' }, { userId: 'user_a b' }, { userId: 'user_1\n' }, { userId: 'user_1.2' }, { userId: ['user_1'] },
  { user_id: 'user_1' }, { UserId: 'user_1' },
];

test('user.created needs data.userId shaped user_<id>', (t) => {
  for (const userId of GOOD_USER_IDS) {
    const parsed = parseEvent('events.t1.user.created', body(JSON.stringify({ userId, email: 'a@example.com' })));
    t.deepEqual(parsed, { ok: true, tenant: 't1', type: 'user.created', data: { userId, email: 'a@example.com' } }, userId);
  }
  for (const data of BAD_USER_DATA) {
    const r = rejected(t, parseEvent('events.t1.user.created', body(JSON.stringify(data))));
    t.is(r.reason, 'invalid_data', JSON.stringify(data));
    t.regex(r.detail, /userId/);
  }
});

test('the userId rule is for user.created only', (t) => {
  for (const type of ['user.updated', 'user.deleted', 'organization.created', 'organizationInvitation.accepted']) {
    t.true(parseEvent(`events.t1.${type}`, body('{}')).ok, type);
  }
});

// ---- limits: checked before the body is parsed ----

const deep = (levels: number, inner = '1') => `{"a":${'['.repeat(levels - 1)}${inner}${']'.repeat(levels - 1)}}`;

test('a body over the size limit is too_large, whatever it holds', (t) => {
  const limits = { maxBytes: 1024, maxDepth: 64 };
  const exact = `{"p":"${'x'.repeat(1024 - 8)}"}`;
  t.is(exact.length, 1024);
  t.true(parseEvent('events.t1.user.updated', body(exact), limits).ok, 'exactly the limit passes');
  const over = `{"p":"${'x'.repeat(1024 - 7)}"}`;
  const r = rejected(t, parseEvent('events.t1.user.updated', body(over), limits));
  t.is(r.reason, 'too_large');
  t.regex(r.detail, /1025 bytes; the limit is 1024/);
  // Size first: a bad subject or name does not hide it.
  t.is(rejected(t, parseEvent('nonsense', body(over), limits)).reason, 'too_large');
  // The default is 256 KiB.
  t.is(DEFAULT_EVENT_LIMITS.maxBytes, 262_144);
  t.is(rejected(t, parseEvent('events.t1.user.updated', new Uint8Array(262_145))).reason, 'too_large');
});

test('nesting deeper than 64 is too_deep; 64 passes', (t) => {
  t.true(parseEvent('events.t1.user.updated', body(deep(64))).ok);
  const r = rejected(t, parseEvent('events.t1.user.updated', body(deep(65))));
  t.is(r.reason, 'too_deep');
  t.is(r.detail, 'body nests deeper than 64 levels');
});

test('100,000 levels in ~200 KB are too_deep, without reaching JSON.parse', (t) => {
  const text = deep(100_000);
  t.true(text.length > 190_000 && text.length < 262_144);
  const parse = JSON.parse;
  let parsed = 0;
  JSON.parse = ((...args: Parameters<typeof JSON.parse>) => { parsed++; return parse(...args); }) as typeof JSON.parse;
  try {
    t.is(rejected(t, parseEvent('events.t1.user.updated', body(text))).reason, 'too_deep');
  } finally {
    JSON.parse = parse;
  }
  t.is(parsed, 0);
});

test('brackets inside strings, and escaped quotes, do not count as nesting', (t) => {
  const tricky = JSON.stringify({ s: '[[[[{{{{'.repeat(100), q: 'a\\"[[[[\\\\', t: '\\\\"' , n: [[1]] });
  t.is(jsonDepth(body(tricky)), 3);
  const parsed = parseEvent('events.t1.user.updated', body(tricky));
  t.true(parsed.ok);
  t.is(jsonDepth(body('{"a":"\\\\"}')), 1, 'an escaped backslash before the closing quote');
  t.is(jsonDepth(body('[{"a":[{}]},[[]]]')), 4);
  t.is(jsonDepth(body('"[[[["')), 0);
});

test('invalid UTF-8 is invalid_utf8 (not decoded to replacement characters)', (t) => {
  const bytes = new Uint8Array(200_000);
  bytes.set(body('{"a":"'));
  bytes.fill(0xff, 6, 199_998);
  bytes.set(body('"}'), 199_998);
  const r = rejected(t, parseEvent('events.t1.user.updated', bytes));
  t.is(r.reason, 'invalid_utf8');
  for (const bad of [[0xc3], [0xe2, 0x82], [0xed, 0xa0, 0x80] /* a surrogate */, [0xc0, 0xaf] /* overlong */]) {
    const b = new Uint8Array([...body('{"a":"'), ...bad, ...body('"}')]);
    t.is(rejected(t, parseEvent('events.t1.user.updated', b)).reason, 'invalid_utf8', JSON.stringify(bad));
  }
  t.true(parseEvent('events.t1.user.updated', body('{"a":"ünï ✓ 😀"}')).ok);
});

test('reasons are the documented vocabulary', (t) => {
  t.deepEqual(Object.values(RejectionReason).sort(), [
    'bad_subject', 'invalid_data', 'invalid_json', 'invalid_ordering_key', 'invalid_utf8', 'not_an_object', 'route_failed', 'too_deep', 'too_large', 'unknown_event',
  ]);
});

test('the delivery body is {type, data}, and one that re-encodes too large is too_large', (t) => {
  const ok = encodeDelivery('user.updated', { a: 1 }, 100);
  t.true(ok.ok && ok.body.toString() === '{"type":"user.updated","data":{"a":1}}');
  // 5 bytes per number in, 22 out: re-encoding can grow a body four-fold.
  const text = `{"n":[${Array(40_000).fill('1e20').join(',')}]}`;
  t.true(text.length < 262_144);
  const parsed = parseEvent('events.t1.user.updated', body(text));
  if (!parsed.ok) return t.fail(parsed.detail);
  const r = encodeDelivery(parsed.type, parsed.data, 512 * 1024 - 4096);
  t.false(r.ok);
  if (!r.ok) t.is(r.reason, 'too_large');
  t.true(mayOutgrow(text.length, 512 * 1024 - 4096), 'the router checks such an event even when it queues it nowhere');
});

test('an event too small to outgrow its delivery body fits it, however it re-encodes', (t) => {
  const max = 512 * 1024 - 4096;
  // The most a number grows (4 characters to 21), as many as fit under the bound.
  let n = 1;
  while (!mayOutgrow(`{"userId":"user_1","n":[${Array(n * 2).fill('1e20').join(',')}]}`.length, max)) n *= 2;
  const text = `{"userId":"user_1","n":[${Array(n).fill('1e20').join(',')}]}`;
  t.false(mayOutgrow(text.length, max));
  const parsed = parseEvent('events.t1.user.updated', body(text));
  if (!parsed.ok) return t.fail(parsed.detail);
  const r = encodeDelivery(parsed.type, parsed.data, max);
  t.true(r.ok);
  t.true(r.ok && r.body.byteLength > text.length * 4, 'it did grow');
});
