// An endpoint's life as events (the ENDPOINTS stream is the source of truth) and the pure fold that
// turns them into state. The projector, the live directory and the command side all use this one fold.
import { isEventPattern, type EventPattern } from './catalogue.ts';
import { conflict, invalid, type FieldError } from '../errors.ts';
import type { EndpointId, TenantId } from './ids.ts';
import { isSignatureScheme, SignatureScheme } from './signature.ts';
import { textProblem } from './text.ts';

// `disabled` (issue 10): hookstream stopped sending (410 Gone, or failing too long); deliveries are kept
// in the endpoint's queue until a restore, unlike `deleted`, whose queue is dropped.
export const EndpointStatus = { Active: 'active', Disabled: 'disabled', Deleted: 'deleted' } as const;
export type EndpointStatus = (typeof EndpointStatus)[keyof typeof EndpointStatus];

/**
 * Why an endpoint was disabled: it answered 410 Gone, or every attempt failed for HOOKSTREAM_DISABLE_AFTER,
 * or an operator disabled it (their reason is in the audit log).
 */
export const DisabledReason = { Gone: 'gone', Failing: 'failing', Operator: 'operator' } as const;
export type DisabledReason = (typeof DisabledReason)[keyof typeof DisabledReason];
export const isDisabledReason = (x: unknown): x is DisabledReason => Object.values(DisabledReason).includes(x as DisabledReason);

/**
 * Issue 21: `key` delivers each ordering key's events in order (src/delivery/ordered-gate.ts); `none`, the
 * default, delivers them with the endpoint's full concurrency and each retry on its own schedule.
 */
export const Ordering = { None: 'none', Key: 'key' } as const;
export type Ordering = (typeof Ordering)[keyof typeof Ordering];
export const isOrdering = (x: unknown): x is Ordering => x === Ordering.None || x === Ordering.Key;

/** Bounds of `rate_limit`, deliveries per second. */
export const MIN_RATE_LIMIT = 1;
export const MAX_RATE_LIMIT = 10_000;

/**
 * A signing secret sealed under the master key and bound to its endpoint (never plaintext at rest): a
 * whsec_ secret for v1, a whsk_ ed25519 key for v1a. `expires_at` marks a rotated-out one.
 */
export interface SealedSecret {
  sealed: string;
  expires_at: string | null;
}

// Wire shapes of the ENDPOINTS stream, version 1. A stream outlives the code that wrote it: add fields,
// never change one; a breaking change gets v: 2 and a branch in applyEndpointEvent.
// Issue 11 added `signature_scheme` and `signing_public_key` to created and secret_rotated: events written
// before have neither and fold as v1 endpoints. For v1a, `secret` holds the sealed whsk_ key.
// Issue 10 added `rate_limit` (absent: none) and `endpoint.disabled`, appended by the delivery role.
// Issue 21 added `ordering` to created and updated (absent: none on create, unchanged on update).
// Direct delivery added `events_seq` to created, restored and an updated that ends `ordering: key`: EVENTS'
// last sequence, read just before the write (absent: written without partitions, or before it existed).
export type EndpointEvent =
  | {
    v: 1; type: 'endpoint.created'; id: EndpointId; tenant: TenantId; url: string; events: EventPattern[]; description: string | null; secret: string; at: string;
    signature_scheme?: SignatureScheme; signing_public_key?: string; rate_limit?: number | null; ordering?: Ordering; events_seq?: number;
  }
  | { v: 1; type: 'endpoint.updated'; id: EndpointId; url?: string; events?: EventPattern[]; description?: string | null; rate_limit?: number | null; ordering?: Ordering; events_seq?: number; at: string }
  | { v: 1; type: 'endpoint.disabled'; id: EndpointId; reason: DisabledReason; at: string }
  | { v: 1; type: 'endpoint.deleted'; id: EndpointId; at: string }
  | { v: 1; type: 'endpoint.restored'; id: EndpointId; events_seq?: number; at: string }
  | { v: 1; type: 'endpoint.secret_rotated'; id: EndpointId; secret: string; previous_expires_at: string | null; at: string; signing_public_key?: string }
  // A master-key rotation (`hookstream keys reseal-secrets`): the same secrets, in the same order with the
  // same expiries, sealed again under the current key. Nothing a tenant sees changes.
  | { v: 1; type: 'endpoint.secrets_resealed'; id: EndpointId; secrets: SealedSecret[]; at: string }
  // The endpoint's whole state, appended by the command side every COMPACT_EVERY events (src/endpoints/
  // store.ts), which then purges the events before it on the subject: a fold may start here. `removes`:
  // how many messages that purge takes (the directory counts the stream's messages).
  | { v: 1; type: 'endpoint.compacted'; id: EndpointId; state: EndpointState; removes: number; at: string };

export type EndpointEventType = EndpointEvent['type'];

export interface EndpointState {
  id: EndpointId;
  tenant: TenantId;
  url: string;
  events: EventPattern[];
  description: string | null;
  status: EndpointStatus;
  /** Current secret first; a rotated-out secret follows until its expiry. */
  secrets: SealedSecret[];
  signatureScheme: SignatureScheme;
  /** The current whpk_ key of a v1a endpoint (not secret: shown on every read); null for v1. */
  signingPublicKey: string | null;
  /** Deliveries per second at most; null for no limit. */
  rateLimit: number | null;
  /** Whether each ordering key's deliveries go out in order (issue 21). */
  ordering: Ordering;
  /** Set while disabled, null otherwise. */
  disabledReason: DisabledReason | null;
  disabledAt: string | null;
  createdAt: string;
  updatedAt: string;
  /** Stream sequence of the last event applied: the expected last subject sequence of the next command. */
  version: number;
  /**
   * Stream sequence of the event that last made the endpoint active after a delete (its creation or the
   * latest restore of a deleted endpoint): a delivery routed from an older view was routed before a delete
   * and is dropped (src/delivery/worker.ts). A restore from `disabled` leaves it: deliveries held while
   * disabled must still go out.
   * Set by the fold; absent in Postgres rows, which never need it.
   */
  activeSince?: number;
  /**
   * Stream sequence of the event that last switched it to `ordering: key` from none: with direct delivery,
   * its direct consumer sends only what was stored before that event (src/delivery/ordering-cutoffs.ts).
   * Set by the fold.
   */
  orderedSince?: number;
  /**
   * Direct delivery: EVENTS' last sequence just before the write that last had its direct consumer start
   * (its creation, a restore after a delete, the switch from `ordering: key` to none). The consumer starts
   * a second early (the clocks of a cluster's servers); what it reads up to here is not the endpoint's,
   * or is still the router's to queue in order (keyedUntil). Set by the fold.
   */
  directAfter?: number;
  /** Direct delivery, switched from `ordering: key` to none: events up to here are still queued in key order. Set by the fold. */
  keyedUntil?: number;
  /** Events applied since its creation or its last compaction (the command side compacts on it). */
  eventsSince?: number;
}

/** An event's `events_seq`, if it carries a usable one. */
const eventsSeqOf = (event: { events_seq?: unknown }): number | undefined =>
  (Number.isSafeInteger(event.events_seq) ? event.events_seq as number : undefined);

export function applyEndpointEvent(state: EndpointState | undefined, event: EndpointEvent, seq: number): EndpointState {
  if (event.type === 'endpoint.created') {
    return {
      id: event.id, tenant: event.tenant, url: event.url, events: event.events, description: event.description,
      status: EndpointStatus.Active, secrets: [{ sealed: event.secret, expires_at: null }],
      signatureScheme: event.signature_scheme ?? SignatureScheme.V1,
      signingPublicKey: event.signature_scheme === SignatureScheme.V1a ? event.signing_public_key ?? null : null,
      rateLimit: event.rate_limit ?? null, ordering: event.ordering ?? Ordering.None, disabledReason: null, disabledAt: null,
      createdAt: event.at, updatedAt: event.at, version: seq, activeSince: seq, eventsSince: 1,
      ...(eventsSeqOf(event) !== undefined ? { directAfter: eventsSeqOf(event) } : {}),
    };
  }
  if (event.type === 'endpoint.compacted') {
    // Checked, not trusted: the fold checks the fields of the state it makes; here what it needs to get there.
    const carried = event.state as unknown;
    if (typeof carried !== 'object' || carried === null || !Array.isArray(event.state.secrets) || event.state.id !== event.id) {
      throw new Error(`endpoint.compacted for ${event.id} carries no state of it`);
    }
    if (state && state.tenant !== event.state.tenant) throw new Error(`endpoint.compacted for ${event.id} names another tenant`);
    return { ...event.state, version: seq, eventsSince: 1 };
  }
  if (!state) throw new Error(`${event.type} for ${event.id} before endpoint.created`);
  const next: EndpointState = { ...state, updatedAt: event.at, version: seq, eventsSince: (state.eventsSince ?? 0) + 1 };
  switch (event.type) {
    case 'endpoint.updated':
      if (event.url !== undefined) next.url = event.url;
      if (event.events !== undefined) next.events = event.events;
      if (event.description !== undefined) next.description = event.description;
      if (event.rate_limit !== undefined) next.rateLimit = event.rate_limit;
      if (event.ordering !== undefined) next.ordering = event.ordering;
      if (next.ordering === Ordering.Key && state.ordering !== Ordering.Key) next.orderedSince = seq;
      if (next.ordering !== Ordering.Key && state.ordering === Ordering.Key) {
        next.directAfter = eventsSeqOf(event);
        next.keyedUntil = eventsSeqOf(event);
      }
      return next;
    case 'endpoint.disabled':
      if (!isDisabledReason(event.reason)) throw new Error(`endpoint.disabled for ${event.id} has no valid reason`);
      next.status = EndpointStatus.Disabled;
      next.disabledReason = event.reason;
      next.disabledAt = event.at;
      return next;
    case 'endpoint.deleted':
      next.status = EndpointStatus.Deleted;
      next.disabledReason = null;
      next.disabledAt = null;
      return next;
    case 'endpoint.restored':
      // Only a restore after a delete starts a new life; one after a disable keeps the held deliveries valid.
      if (state.status === EndpointStatus.Deleted) {
        next.activeSince = seq;
        next.directAfter = eventsSeqOf(event);
        next.keyedUntil = undefined;
      }
      next.status = EndpointStatus.Active;
      next.disabledReason = null;
      next.disabledAt = null;
      return next;
    case 'endpoint.secret_rotated': {
      const previous = state.secrets[0];
      next.secrets = [{ sealed: event.secret, expires_at: null }];
      if (previous && event.previous_expires_at) next.secrets.push({ sealed: previous.sealed, expires_at: event.previous_expires_at });
      // The scheme stays what it was at creation; a v1a rotation brings the new pair's public key.
      if (state.signatureScheme === SignatureScheme.V1a && event.signing_public_key !== undefined) next.signingPublicKey = event.signing_public_key;
      return next;
    }
    case 'endpoint.secrets_resealed':
      // Checked, not trusted: a malformed event must be skipped by every reader, never leave an endpoint without a key.
      if (!isSealedSecretList(event.secrets)) throw new Error(`endpoint.secrets_resealed for ${event.id} carries no valid secrets`);
      next.secrets = event.secrets.map((x) => ({ sealed: x.sealed, expires_at: x.expires_at }));
      return next;
  }
}

function isSealedSecretList(x: unknown): x is SealedSecret[] {
  return Array.isArray(x) && x.length > 0 && x.every((s: unknown) => {
    if (typeof s !== 'object' || s === null) return false;
    const { sealed, expires_at } = s as { sealed?: unknown; expires_at?: unknown };
    return typeof sealed === 'string' && sealed.length > 0 && (expires_at === null || typeof expires_at === 'string');
  });
}

/** Secrets that sign a delivery made at `now`: the current one and a rotated-out one still in its grace period. */
export function liveSecrets(state: Pick<EndpointState, 'secrets'>, now: number): SealedSecret[] {
  return state.secrets.filter((s) => s.expires_at === null || Date.parse(s.expires_at) > now);
}

const EVENT_TYPES: ReadonlySet<string> = new Set<EndpointEventType>([
  'endpoint.created', 'endpoint.updated', 'endpoint.deleted', 'endpoint.restored', 'endpoint.secret_rotated',
  'endpoint.secrets_resealed', 'endpoint.disabled', 'endpoint.compacted',
]);

/** A version-1 endpoint event of a known type: what every reader of the stream may fold. */
export function isEndpointEvent(x: unknown): x is EndpointEvent {
  if (typeof x !== 'object' || x === null) return false;
  const e = x as { v?: unknown; type?: unknown; id?: unknown };
  return e.v === 1 && typeof e.type === 'string' && EVENT_TYPES.has(e.type) && typeof e.id === 'string';
}

export type DecodedEndpointMessage = { ok: true; event: EndpointEvent } | { ok: false; reason: string };

const utf8 = new TextDecoder();

/**
 * The one decoder of ENDPOINTS messages, used by every reader of the stream through src/endpoints/fold.ts
 * (which names the endpoint of the message's subject). A message that is not JSON,
 * not a version-1 event of a known type, or (when the reader read one endpoint's subject and names it)
 * another endpoint's event is skipped with this reason, never thrown: one bad message must not stop a
 * reader or fail every command on an endpoint. Readers log each skip once, with its sequence; an event
 * the fold refuses (applyEndpointEvent throws) is skipped the same way.
 */
export function decodeEndpointMessage(data: Uint8Array, subjectOf?: EndpointId): DecodedEndpointMessage {
  let body: unknown;
  try {
    body = JSON.parse(utf8.decode(data));
  } catch {
    return { ok: false, reason: 'not JSON' };
  }
  if (!isEndpointEvent(body)) return { ok: false, reason: 'not an endpoint event' };
  if (subjectOf !== undefined && body.id !== subjectOf) return { ok: false, reason: `an event of ${String(body.id).slice(0, 100)} on another endpoint's subject` };
  return { ok: true, event: body };
}

// ---- command validation and decisions (pure; the store publishes what these return) ----

/** The fields a tenant sets, as the endpoint events carry them. */
export interface EndpointFields {
  url: string;
  events: EventPattern[];
  description: string | null;
  rate_limit: number | null;
  ordering: Ordering;
}

/** A create body or command-line input before it is checked. */
export interface EndpointInput {
  url?: unknown;
  events?: unknown;
  description?: unknown;
  /** Deliveries per second, 1..10,000, or null for none. */
  rate_limit?: unknown;
  /** "none" (default) or "key". */
  ordering?: unknown;
  /** Create only: "v1" (default) or "v1a". */
  signature_scheme?: unknown;
}

/** A checked create: what the store appends as endpoint.created (absent optional fields: none, v1). */
export interface NewEndpoint {
  url: string;
  events: EventPattern[];
  description?: string | null;
  rate_limit?: number | null;
  ordering?: Ordering;
  signature_scheme?: SignatureScheme;
}

/** A checked update: only the fields given change. */
export type EndpointPatch = Partial<EndpointFields>;

/** The deployment's target policy: the problem with a URL, or undefined. */
export type CheckUrl = (url: URL) => string | undefined;

export const MAX_DESCRIPTION = 1000;
export const MAX_URL = 2048;
export const MAX_PATTERNS = 64;

/** Every problem of the user-supplied fields (none when `out` is complete for the fields given). */
function checkFields(input: EndpointInput, partial: boolean, checkUrl: CheckUrl): { out: EndpointPatch; problems: FieldError[] } {
  const problems: FieldError[] = [];
  const out: EndpointPatch = {};
  if (input.url !== undefined || !partial) {
    if (typeof input.url !== 'string' || input.url.length === 0) problems.push({ field: 'url', message: 'is required and must be a string' });
    else if (input.url.length > MAX_URL) problems.push({ field: 'url', message: `must be at most ${MAX_URL} characters` });
    else {
      let url: URL | undefined;
      try { url = new URL(input.url); } catch { problems.push({ field: 'url', message: 'is not a valid URL' }); }
      if (url) {
        const problem = url.username || url.password ? 'must not carry credentials (user:password@): they would be stored and shown with the URL; receivers verify the signature instead' : checkUrl(url);
        if (problem) problems.push({ field: 'url', message: problem });
        else out.url = url.toString();
      }
    }
  }
  if (input.events !== undefined || !partial) {
    if (!Array.isArray(input.events) || input.events.length === 0) problems.push({ field: 'events', message: 'must be a non-empty list of event names or wildcards' });
    else if (input.events.length > MAX_PATTERNS) problems.push({ field: 'events', message: `must list at most ${MAX_PATTERNS} patterns` });
    else {
      input.events.forEach((e, i) => {
        if (!isEventPattern(e)) problems.push({ field: `events[${i}]`, message: typeof e === 'string' ? `unknown event name or wildcard ${JSON.stringify(e.slice(0, 200))}` : `must be a string (an event name or wildcard), not ${Array.isArray(e) ? 'a list' : typeof e === 'object' ? 'an object or null' : `a ${typeof e}`}` });
      });
      if (problems.every((p) => !p.field.startsWith('events'))) out.events = [...new Set(input.events as EventPattern[])];
    }
  }
  if (input.description !== undefined) {
    if (input.description !== null && typeof input.description !== 'string') problems.push({ field: 'description', message: 'must be a string' });
    else if (typeof input.description === 'string' && input.description.length > MAX_DESCRIPTION) problems.push({ field: 'description', message: `must be at most ${MAX_DESCRIPTION} characters` });
    else {
      const problem = typeof input.description === 'string' ? textProblem(input.description, { multiline: true }) : undefined;
      if (problem) problems.push({ field: 'description', message: problem });
      else out.description = input.description;
    }
  } else if (!partial) out.description = null;
  if (input.rate_limit !== undefined) {
    const r = input.rate_limit;
    if (r !== null && !(typeof r === 'number' && Number.isInteger(r) && r >= MIN_RATE_LIMIT && r <= MAX_RATE_LIMIT)) {
      problems.push({ field: 'rate_limit', message: `must be a whole number of deliveries per second from ${MIN_RATE_LIMIT} to ${MAX_RATE_LIMIT}, or null` });
    } else out.rate_limit = r;
  } else if (!partial) out.rate_limit = null;
  if (input.ordering !== undefined) {
    if (!isOrdering(input.ordering)) problems.push({ field: 'ordering', message: 'must be "none" or "key"' });
    else out.ordering = input.ordering;
  } else if (!partial) out.ordering = Ordering.None;
  return { out, problems };
}

/**
 * Check a create once, at the boundary (API or command line); throws one 422 listing every problem.
 * `checkUrl` applies the deployment's target policy (https only, no private addresses unless allowed).
 * The store trusts what this returns and checks nothing again.
 */
export function parseNewEndpoint(input: EndpointInput, checkUrl: CheckUrl): NewEndpoint {
  const { out, problems } = checkFields(input, false, checkUrl);
  const scheme = input.signature_scheme === undefined ? SignatureScheme.V1 : input.signature_scheme;
  if (!isSignatureScheme(scheme)) problems.push({ field: 'signature_scheme', message: 'must be "v1" or "v1a"' });
  if (problems.length || !isSignatureScheme(scheme)) throw invalid(problems);
  return { url: out.url!, events: out.events!, description: out.description ?? null, rate_limit: out.rate_limit ?? null, ordering: out.ordering ?? Ordering.None, signature_scheme: scheme };
}

/** Check an update once, at the boundary: only the fields given; throws one 422 listing every problem. */
export function parseEndpointPatch(input: EndpointInput, checkUrl: CheckUrl): EndpointPatch {
  const { out, problems } = checkFields(input, true, checkUrl);
  if (problems.length) throw invalid(problems);
  return out;
}

export function assertActive(state: EndpointState): void {
  if (state.status !== EndpointStatus.Active) throw conflict(`endpoint ${state.id} is ${state.status}; restore it first`);
}

/** Tenants may change or delete a disabled endpoint (to fix its URL before a restore), not a deleted one. */
export function assertNotDeleted(state: EndpointState): void {
  if (state.status === EndpointStatus.Deleted) throw conflict(`endpoint ${state.id} is deleted; restore it first`);
}

/** A restore brings back a deleted or a disabled endpoint; an active one is a conflict. */
export function assertRestorable(state: EndpointState): void {
  if (state.status === EndpointStatus.Active) throw conflict(`endpoint ${state.id} is not deleted or disabled`);
}
