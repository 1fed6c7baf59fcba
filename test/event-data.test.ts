// What a producer publishes to events.<tenant>.<event name> and what parseEvent makes of it.
import test from 'ava';
import { parseEvent, type ParsedEvent } from '../src/domain/event-data.ts';

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

const NOT_OBJECTS = ['[]', '[{"userId":"user_1"}]', 'null', '42', '"user_1"', 'true', '', 'not json', '{"userId":', '{} {}'];

for (const text of NOT_OBJECTS) {
  test(`body ${JSON.stringify(text)} is not a JSON object`, (t) => {
    t.is(rejected(t, parseEvent('events.t1.user.updated', body(text))).reason, 'not_json_object');
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
