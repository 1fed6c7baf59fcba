// The one fold of ENDPOINTS (issue 23): every reader of the stream (the endpoint directory, the command
// side's read of one endpoint, the secrets reseal and the Postgres projection) decodes, binds and applies
// an event here, so they accept and skip exactly the same events. Before, an event on `endpoints.A` whose
// body named B changed B for routing and for the API but not for the command side, and the projection
// skipped events the directory applied.
//
// The rules: an event is JSON, a version-1 event of a known type, for the endpoint its subject names;
// applyEndpointEvent accepts it; and the state it makes is well formed (types, ranges, and no text that a
// store cannot hold: U+0000). Anything else is skipped with its reason, never thrown.
import { endpointOfSubject } from '../../streams/endpoints.ts';
import {
  applyEndpointEvent, decodeEndpointMessage, EndpointStatus, isDisabledReason, isOrdering, MAX_RATE_LIMIT, MIN_RATE_LIMIT,
  type DecodedEndpointMessage, type EndpointEvent, type EndpointState,
} from '../domain/endpoint.ts';
import type { EndpointId } from '../domain/ids.ts';
import { describe } from '../errors.ts';

/** A message of the ENDPOINTS stream as every reader gets it. */
export interface EndpointMessage {
  subject: string;
  data: Uint8Array;
  seq: number;
}

export type EndpointStep =
  | { ok: true; event: EndpointEvent; state: EndpointState }
  | { ok: false; reason: string; endpoint?: EndpointId };

/** The event of a message, bound to the endpoint its subject names. */
export const decodeEndpointEvent = (m: Pick<EndpointMessage, 'subject' | 'data'>): DecodedEndpointMessage =>
  decodeEndpointMessage(m.data, endpointOfSubject(m.subject));

const isText = (x: unknown): x is string => typeof x === 'string';
const isTime = (x: unknown): boolean => isText(x) && Number.isFinite(Date.parse(x));
// Postgres text cannot hold U+0000 (issue 23: one such description stopped every tenant's writes).
const holdsNul = (x: unknown): boolean => isText(x) && x.includes('\u0000');

/** Why a state is not one every reader can hold, or undefined. A well-typed event may still carry wrong fields. */
export function endpointStateProblem(s: EndpointState): string | undefined {
  const texts = [s.id, s.tenant, s.url, s.description, s.signingPublicKey, ...(Array.isArray(s.events) ? s.events : []), ...s.secrets.map((x) => x.sealed)];
  if (texts.some(holdsNul)) return 'a text field holds U+0000';
  if (!isText(s.id) || !isText(s.tenant) || !isText(s.url)) return 'id, tenant and url must be strings';
  if (!Array.isArray(s.events) || !s.events.every(isText)) return 'events must be a list of strings';
  if (s.description !== null && !isText(s.description)) return 'description must be a string or null';
  if (s.status !== EndpointStatus.Active && s.status !== EndpointStatus.Disabled && s.status !== EndpointStatus.Deleted) return 'status must be active, disabled or deleted';
  if (s.rateLimit !== null && !(Number.isInteger(s.rateLimit) && s.rateLimit >= MIN_RATE_LIMIT && s.rateLimit <= MAX_RATE_LIMIT)) return 'rate_limit must be an integer from 1 to 10000 or null';
  if (!isOrdering(s.ordering)) return 'ordering must be none or key';
  if (s.disabledReason !== null && !isDisabledReason(s.disabledReason)) return 'disabled_reason must be gone, failing, operator or null';
  if (s.disabledAt !== null && !isTime(s.disabledAt)) return 'disabled_at must be an ISO date or null';
  if (s.signatureScheme !== 'v1' && s.signatureScheme !== 'v1a') return 'signature_scheme must be v1 or v1a';
  if (s.signingPublicKey !== null && !isText(s.signingPublicKey)) return 'signing_public_key must be a string or null';
  if (!s.secrets.every((x) => isText(x.sealed) && x.sealed.length > 0)) return 'secrets must be sealed strings';
  if (!isTime(s.createdAt) || !isTime(s.updatedAt)) return 'timestamps must be ISO dates';
  return undefined;
}

/** `event` applied to `previous`, when the fold accepts it and the state it makes is well formed. */
export function nextEndpointState(previous: EndpointState | undefined, event: EndpointEvent, seq: number): EndpointStep {
  let state: EndpointState;
  try {
    state = applyEndpointEvent(previous, event, seq);
  } catch (e) {
    return { ok: false, reason: `cannot apply ${event.type} to ${event.id}: ${describe(e)}`, endpoint: event.id };
  }
  const problem = endpointStateProblem(state);
  if (problem) return { ok: false, reason: `malformed fields in ${event.type} of ${event.id}: ${problem}`, endpoint: event.id };
  return { ok: true, event, state };
}

/** Decode, bind and apply one message: the next state of its endpoint, or why the message is skipped. */
export function foldEndpointMessage(m: EndpointMessage, stateOf: (id: EndpointId) => EndpointState | undefined): EndpointStep {
  const decoded = decodeEndpointEvent(m);
  if (!decoded.ok) return decoded;
  return nextEndpointState(stateOf(decoded.event.id), decoded.event, m.seq);
}
