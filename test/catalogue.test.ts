// The catalogue against the specification (section 6), retyped here from the spec's table rather than
// derived from the code, so a wrong name or a wrong wildcard rule in src/domain/catalogue.ts shows up.
import test from 'ava';
import {
  EVENT_NAMES, WILDCARDS, describeCatalogue, isEventName, isEventPattern, matches, matchesAny,
  type EventName, type EventPattern,
} from '../src/domain/catalogue.ts';

// One row per row of the spec's event table: object, actions, and the wildcards of 6.1 that cover it.
const SPEC: { object: string; actions: string[]; wildcards: string[] }[] = [
  { object: 'user', actions: ['created', 'updated', 'deleted', 'restored', 'banned', 'unbanned', 'deactivated'], wildcards: ['user.*', '*'] },
  { object: 'organization', actions: ['created', 'updated', 'deleted', 'restored'], wildcards: ['organization.*', '*'] },
  { object: 'organization.auth_policy', actions: ['updated'], wildcards: ['organization.*', '*'] },
  { object: 'organization.delivery_channels', actions: ['updated'], wildcards: ['organization.*', '*'] },
  { object: 'organization.social_providers', actions: ['updated'], wildcards: ['organization.*', '*'] },
  { object: 'organization.outbound_saml_app', actions: ['created', 'deleted'], wildcards: ['organization.*', '*'] },
  { object: 'organization.scim_target', actions: ['created', 'deleted'], wildcards: ['organization.*', '*'] },
  { object: 'organizationMembership', actions: ['created', 'updated', 'deleted', 'restored'], wildcards: ['organizationMembership.*', '*'] },
  { object: 'organizationInvitation', actions: ['created', 'accepted', 'revoked'], wildcards: ['*'] },
  { object: 'connection', actions: ['saml_certificate_renewed'], wildcards: ['*'] },
];

const SPEC_EVENTS = new Map<string, string[]>(
  SPEC.flatMap(({ object, actions, wildcards }) => actions.map((a) => [`${object}.${a}`, wildcards] as const)),
);

// The count of the spec's table (7+4+1+1+1+2+2+4+3+1), written out so a dropped row fails the test.
const SPEC_EVENT_COUNT = 26;

test('the catalogue is exactly the spec section 6 event names, each once', (t) => {
  t.is(SPEC_EVENTS.size, SPEC_EVENT_COUNT);
  t.is(EVENT_NAMES.length, SPEC_EVENT_COUNT);
  t.is(new Set(EVENT_NAMES).size, EVENT_NAMES.length, 'duplicate event names');
  t.deepEqual([...EVENT_NAMES].sort(), [...SPEC_EVENTS.keys()].sort());
});

test('the wildcards are exactly the four of spec 6.1', (t) => {
  t.deepEqual([...WILDCARDS].sort(), ['*', 'organization.*', 'organizationMembership.*', 'user.*']);
});

const ALL_PATTERNS: EventPattern[] = [...WILDCARDS, ...EVENT_NAMES];

for (const pattern of ALL_PATTERNS) {
  test(`pattern ${pattern} matches exactly the events the spec says`, (t) => {
    const expected = [...SPEC_EVENTS]
      .filter(([event, wildcards]) => (pattern.includes('*') ? wildcards.includes(pattern) : pattern === event))
      .map(([event]) => event)
      .sort();
    const actual = EVENT_NAMES.filter((event) => matches(pattern, event)).sort();
    t.deepEqual(actual, expected);
    t.true(isEventPattern(pattern));
  });
}

test('organization.* takes the dotted sub-events but not organizationMembership or organizationInvitation', (t) => {
  t.true(matches('organization.*', 'organization.auth_policy.updated'));
  t.true(matches('organization.*', 'organization.scim_target.deleted'));
  t.false(matches('organization.*', 'organizationMembership.created'));
  t.false(matches('organization.*', 'organizationInvitation.accepted'));
});

test('matchesAny is true when any pattern matches and false for no patterns', (t) => {
  t.false(matchesAny([], 'user.created'));
  t.true(matchesAny(['organizationMembership.*', 'user.deleted'], 'user.deleted'));
  t.false(matchesAny(['organizationMembership.*', 'user.deleted'], 'user.created'));
  t.true(matchesAny(['connection.saml_certificate_renewed', '*'], 'organizationInvitation.revoked'));
});

test('describeCatalogue lists every event and, per wildcard, the events the spec puts under it', (t) => {
  const described = describeCatalogue();
  t.deepEqual([...described.events].sort(), [...SPEC_EVENTS.keys()].sort());
  t.is(described.wildcards.length, 4);
  for (const { pattern, matches: covered } of described.wildcards) {
    const expected = [...SPEC_EVENTS].filter(([, w]) => w.includes(pattern)).map(([e]) => e).sort();
    t.deepEqual([...covered].sort(), expected, pattern);
  }
});

const NOT_PATTERNS: unknown[] = [
  'organizationInvitation.*', 'connection.*', 'user.**', 'User.created', 'USER.*', '', 'user.', 'user',
  '*.*', '**', ' *', '* ', 'user.* ', ' user.created', 'user.created ', 'organization.auth_policy.*',
  'organization.*.updated', 'user.*.created', 'organizationMembership', 'organization_membership.*',
  'user.created.*', '>', 'user.>', 'events.user.created', 'user.Created', 'organization.auth_policy',
  null, undefined, 42, ['user.*'], { pattern: 'user.*' },
];

for (const candidate of NOT_PATTERNS) {
  test(`isEventPattern rejects ${JSON.stringify(candidate) ?? String(candidate)}`, (t) => {
    t.false(isEventPattern(candidate));
    t.false(isEventName(candidate));
  });
}

test('isEventName accepts every spec name and no wildcard', (t) => {
  for (const name of SPEC_EVENTS.keys()) t.true(isEventName(name), name);
  for (const w of ['*', 'user.*', 'organization.*', 'organizationMembership.*']) t.false(isEventName(w), w);
});

test('every event in the catalogue is of the form <object>.<action> with a known object', (t) => {
  const objects = new Set(SPEC.map((r) => r.object));
  for (const name of EVENT_NAMES as readonly EventName[]) {
    const dot = name.lastIndexOf('.');
    t.true(objects.has(name.slice(0, dot)), name);
  }
});
