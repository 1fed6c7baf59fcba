// Request bodies: JSON only (415 otherwise), at most 64 KB (413), readable and well-formed (400), a
// JSON object (422), and no field the route does not know (422, each unknown field named).
import { bodyParser } from '@koa/bodyparser';
import type { Middleware } from 'koa';
import { badRequest, type FieldError, type HookstreamError } from '../errors.ts';
import { payloadTooLarge, unsupportedMediaType } from './errors.ts';
import type { ApiState } from './state.ts';

export const MAX_BODY_BYTES = 64 * 1024;

/**
 * What went wrong while reading or parsing a body. Everything here is the request's fault: raw-body's
 * http-errors (413, 415 for an unknown content-encoding, 400 for a short body), co-body's syntax
 * errors, a broken gzip stream, or JSON nested too deep for the parser.
 */
function bodyError(e: unknown): HookstreamError {
  const { status, type } = (e ?? {}) as { status?: unknown; type?: unknown };
  if (status === 413 || type === 'entity.too.large') {
    return payloadTooLarge(`the request body is larger than ${MAX_BODY_BYTES / 1024} KB`);
  }
  if (status === 415) return unsupportedMediaType('unsupported content-encoding or charset');
  if (type === 'request.size.invalid') return badRequest('the request body does not match its content-length');
  if (type === 'request.aborted') return badRequest('the request body was cut short');
  if (e instanceof SyntaxError) return badRequest('the request body is not valid JSON');
  return badRequest('the request body cannot be read (does it match its content-encoding?)');
}

export function jsonBody(): Middleware<ApiState> {
  const parse = bodyParser({ enableTypes: ['json'], jsonLimit: MAX_BODY_BYTES, encoding: 'utf-8', jsonStrict: true });
  const done = async () => {};
  return async (ctx, next) => {
    // A body that is declared (content-length above 0, or chunked) must say it is JSON.
    const declared = ctx.get('transfer-encoding') !== '' || (ctx.get('content-length') !== '' && ctx.get('content-length') !== '0');
    if (declared && !ctx.is('application/json')) throw unsupportedMediaType();
    // Parse with a no-op `next`, so only the parser's own failures are mapped here.
    try {
      await parse(ctx, done);
    } catch (e) {
      throw bodyError(e);
    }
    return next();
  };
}

/**
 * The parsed body as a record of the allowed fields, and a problem for each field that is not allowed.
 * No body at all counts as an empty object.
 */
export function bodyFields(body: unknown, allowed: readonly string[]): { fields: Record<string, unknown>; problems: FieldError[] } {
  if (body === undefined) return { fields: {}, problems: [] };
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    return { fields: {}, problems: [{ field: 'body', message: 'must be a JSON object' }] };
  }
  const fields: Record<string, unknown> = {};
  const problems: FieldError[] = [];
  for (const [name, value] of Object.entries(body)) {
    if (allowed.includes(name)) fields[name] = value;
    else problems.push({ field: name.slice(0, 200), message: 'is not a known field' });
  }
  return { fields, problems };
}
