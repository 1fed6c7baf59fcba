// Query strings: only the parameters a route knows, each at most once, each well-formed; else 400.
import { isEndpointId, type EndpointId } from '../domain/ids.ts';
import { badRequest, type FieldError } from '../errors.ts';

export const DEFAULT_LIMIT = 20;
export const MAX_LIMIT = 100;

export interface ListQuery {
  limit: number;
  cursor: EndpointId | undefined;
}

export function parseListQuery(querystring: string): ListQuery {
  const params = new URLSearchParams(querystring);
  const problems: FieldError[] = [];
  const seen = new Map<string, string[]>();
  for (const [name, value] of params) seen.set(name, [...(seen.get(name) ?? []), value]);
  for (const [name, values] of seen) {
    if (name !== 'limit' && name !== 'cursor') problems.push({ field: name, message: 'is not a known query parameter' });
    else if (values.length > 1) problems.push({ field: name, message: 'must be given at most once' });
  }
  let limit = DEFAULT_LIMIT;
  const rawLimit = params.get('limit');
  if (rawLimit !== null) {
    const n = /^\d{1,4}$/.test(rawLimit) ? Number(rawLimit) : NaN;
    if (!(n >= 1 && n <= MAX_LIMIT)) problems.push({ field: 'limit', message: `must be a whole number from 1 to ${MAX_LIMIT}` });
    else limit = n;
  }
  const rawCursor = params.get('cursor');
  let cursor: EndpointId | undefined;
  if (rawCursor !== null) {
    if (!isEndpointId(rawCursor)) problems.push({ field: 'cursor', message: 'is not a cursor this API returned' });
    else cursor = rawCursor;
  }
  if (problems.length) throw badRequest(problems.map((p) => `${p.field} ${p.message}`).join('; '), problems);
  return { limit, cursor };
}

/** For routes that take no query parameters. */
export function rejectQuery(querystring: string): void {
  const names = [...new Set([...new URLSearchParams(querystring).keys()])];
  if (names.length) {
    const problems = names.map((field) => ({ field, message: 'is not a known query parameter' }));
    throw badRequest(problems.map((p) => `${p.field} ${p.message}`).join('; '), problems);
  }
}
