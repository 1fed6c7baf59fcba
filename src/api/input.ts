// Validation of request bodies before they become commands: every problem in one 422, unknown fields
// included, so a caller fixes a request in one round trip.
import { parseEndpointPatch, parseNewEndpoint, type CheckUrl, type EndpointPatch, type NewEndpoint } from '../domain/endpoint.ts';
import { invalid, isHookstreamError, ErrorCode, type FieldError } from '../errors.ts';
import { DEFAULT_GRACE_MS, MAX_GRACE_MS } from '../endpoints/store.ts';
import { bodyFields } from './body.ts';
import { ENDPOINT_CREATE_IN_FIELDS, ENDPOINT_IN_FIELDS, ROTATE_SECRET_IN_FIELDS } from './wire.ts';

/** `parse`'s result, or one 422 with the body's own problems first and then the fields' problems. */
function parseAfter<T>(body: unknown, allowed: readonly string[], parse: (fields: Record<string, unknown>) => T): T {
  const { fields, problems } = bodyFields(body, allowed);
  // Not an object: its fields cannot be checked.
  if (problems.some((p) => p.field === 'body')) throw invalid(problems);
  let later: FieldError[] = [];
  let parsed: T | undefined;
  try {
    parsed = parse(fields);
  } catch (e) {
    if (!isHookstreamError(e, ErrorCode.ValidationFailed)) throw e;
    later = e.details;
  }
  if (problems.length || later.length || parsed === undefined) throw invalid([...problems, ...later]);
  return parsed;
}

/** A create body, checked once here: the store takes the typed fields as they are. */
export const createInput = (body: unknown, checkUrl: CheckUrl): NewEndpoint =>
  parseAfter(body, ENDPOINT_CREATE_IN_FIELDS, (fields) => parseNewEndpoint(fields, checkUrl));

/** An update body (every field optional), checked once here. */
export const updateInput = (body: unknown, checkUrl: CheckUrl): EndpointPatch =>
  parseAfter(body, ENDPOINT_IN_FIELDS, (fields) => parseEndpointPatch(fields, checkUrl));

/** The rotate-secret body (optional): the grace period in milliseconds. */
export function graceInput(body: unknown): number {
  const { fields, problems } = bodyFields(body, ROTATE_SECRET_IN_FIELDS);
  const value = fields['grace_period_seconds'];
  const maxSeconds = MAX_GRACE_MS / 1000;
  if (value !== undefined && !(typeof value === 'number' && Number.isInteger(value) && value >= 0 && value <= maxSeconds)) {
    problems.push({ field: 'grace_period_seconds', message: `must be a whole number of seconds from 0 to ${maxSeconds}` });
  }
  if (problems.length) throw invalid(problems);
  return value === undefined ? DEFAULT_GRACE_MS : (value as number) * 1000;
}

/** Routes that take no body accept none, or an empty object. */
export function emptyInput(body: unknown): void {
  const { problems } = bodyFields(body, []);
  if (problems.length) throw invalid(problems);
}
