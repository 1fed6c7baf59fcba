// The event catalogue of the specification (section 6) and its four subscription wildcards (6.1).
// Nothing else is an event name or a pattern.

export const EVENT_NAMES = [
  'user.created', 'user.updated', 'user.deleted', 'user.restored', 'user.banned', 'user.unbanned', 'user.deactivated',
  'organization.created', 'organization.updated', 'organization.deleted', 'organization.restored',
  'organization.auth_policy.updated',
  'organization.delivery_channels.updated',
  'organization.social_providers.updated',
  'organization.outbound_saml_app.created', 'organization.outbound_saml_app.deleted',
  'organization.scim_target.created', 'organization.scim_target.deleted',
  'organizationMembership.created', 'organizationMembership.updated', 'organizationMembership.deleted',
  'organizationMembership.restored',
  'organizationInvitation.created', 'organizationInvitation.accepted', 'organizationInvitation.revoked',
  'connection.saml_certificate_renewed',
] as const;

export type EventName = (typeof EVENT_NAMES)[number];

export const WILDCARDS = ['user.*', 'organization.*', 'organizationMembership.*', '*'] as const;
export type Wildcard = (typeof WILDCARDS)[number];
export type EventPattern = EventName | Wildcard;

const names: ReadonlySet<string> = new Set(EVENT_NAMES);
const wildcards: ReadonlySet<string> = new Set(WILDCARDS);

export const isEventName = (s: unknown): s is EventName => typeof s === 'string' && names.has(s);
export const isEventPattern = (s: unknown): s is EventPattern =>
  typeof s === 'string' && (names.has(s) || wildcards.has(s));

/**
 * Whether a subscription pattern covers an event. `organization.*` takes the dotted sub-events
 * (organization.auth_policy.updated) but not organizationMembership.*: the prefix must end at a dot.
 */
export function matches(pattern: EventPattern, event: EventName): boolean {
  if (pattern === '*') return true;
  if (pattern.endsWith('.*')) return event.startsWith(pattern.slice(0, -1));
  return pattern === event;
}

export const matchesAny = (patterns: readonly EventPattern[], event: EventName): boolean =>
  patterns.some((p) => matches(p, event));

/** The catalogue as the API shows it. */
export function describeCatalogue(): { events: EventName[]; wildcards: { pattern: Wildcard; matches: EventName[] }[] } {
  return {
    events: [...EVENT_NAMES],
    wildcards: WILDCARDS.map((pattern) => ({ pattern, matches: EVENT_NAMES.filter((e) => matches(pattern, e)) })),
  };
}
