// Validation of request bodies before they become commands: every problem in one 422, unknown fields
// included, so a caller fixes a request in one round trip.
import { parseSignatureScheme, validateFields } from '../domain/endpoint.ts';
import { invalid, isHookstreamError, ErrorCode, type FieldError } from '../errors.ts';
import { DEFAULT_GRACE_MS, MAX_GRACE_MS, type EndpointInput } from '../endpoints/store.ts';
import { bodyFields } from './body.ts';
import { ENDPOINT_CREATE_IN_FIELDS, ENDPOINT_IN_FIELDS, ROTATE_SECRET_IN_FIELDS } from './wire.ts';

type CheckUrl = (url: URL) => string | undefined;

/** The problems `check` reports as a 422, or none. */
function problemsOf(check: () => unknown): FieldError[] {
  try {
    check();
    return [];
  } catch (e) {
    if (isHookstreamError(e, ErrorCode.ValidationFailed)) return e.details;
    throw e;
  }
}

/** A create (partial = false) or update (partial = true) body; throws 422 listing every problem. */
export function endpointInput(body: unknown, partial: boolean, checkUrl: CheckUrl): EndpointInput {
  const { fields, problems } = bodyFields(body, partial ? ENDPOINT_IN_FIELDS : ENDPOINT_CREATE_IN_FIELDS);
  const isObject = !problems.some((p) => p.field === 'body');
  const all = [
    ...problems,
    ...(isObject ? problemsOf(() => validateFields(fields, partial, checkUrl)) : []),
    ...(isObject && !partial ? problemsOf(() => parseSignatureScheme(fields['signature_scheme'])) : []),
  ];
  if (all.length) throw invalid(all);
  return fields;
}

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
