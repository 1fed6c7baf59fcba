// The one place where a failure becomes an HTTP answer: every error, thrown anywhere below, leaves as
// {"error": {"code", "message", "details"}} with the status of its kind. Unexpected errors answer a
// bare 500 (no message, no stack, nothing that could hold a secret) and are logged with the request id.
import type { Middleware } from 'koa';
import { ErrorCode, isHookstreamError, type FieldError } from '../errors.ts';
import { isPostgresUnavailable } from '../db/orm.ts';
import { newIdBody } from '../domain/ids.ts';
import type { Logger } from '../log.ts';
import type { ApiState } from './state.ts';
import { isQuotaExceeded } from '../tenants/quotas.ts';

export interface ErrorBody {
  /** `limit`: the quota a quota_exceeded names (src/tenants/quotas.ts). */
  error: { code: ErrorCode; message: string; details: FieldError[]; limit?: string };
}

export interface RenderedError {
  status: number;
  body: ErrorBody;
  headers: Record<string, string>;
  /** A bug or an outage rather than a bad request: logged with its stack. */
  unexpected: boolean;
}

const render = (status: number, code: ErrorCode, message: string, opts: { details?: FieldError[]; headers?: Record<string, string>; unexpected?: boolean } = {}): RenderedError => ({
  status,
  body: { error: { code, message, details: opts.details ?? [] } },
  headers: opts.headers ?? {},
  unexpected: opts.unexpected ?? false,
});

/** The HTTP status of each code a caller may see with its message; any other code is a bare 500. */
const STATUS: Partial<Record<ErrorCode, number>> = {
  [ErrorCode.BadRequest]: 400,
  [ErrorCode.Unauthorized]: 401,
  [ErrorCode.NotFound]: 404,
  [ErrorCode.MethodNotAllowed]: 405,
  [ErrorCode.Conflict]: 409,
  [ErrorCode.PayloadTooLarge]: 413,
  [ErrorCode.UnsupportedMediaType]: 415,
  [ErrorCode.ValidationFailed]: 422,
  [ErrorCode.RateLimited]: 429,
  // A count the tenant must lower itself; a rate (with retry-after) is 429 below.
  [ErrorCode.QuotaExceeded]: 422,
};

const retryAfter = (seconds: number) => ({ 'retry-after': String(seconds) });

export function renderError(e: unknown): RenderedError {
  // Postgres down or restarting: the driver's own error, which no layer above turned into ours.
  const code = isHookstreamError(e) ? e.code : isPostgresUnavailable(e) ? ErrorCode.Unreachable : ErrorCode.Internal;
  const after = isHookstreamError(e) ? e.retryAfterSeconds : undefined;
  switch (code) {
    // 503s say nothing of what lags or which server is down: that is for the log.
    case ErrorCode.Unavailable:
      return render(503, ErrorCode.Unavailable, 'the service is catching up; retry shortly', { headers: retryAfter(after ?? 1), unexpected: true });
    case ErrorCode.Unreachable:
      return render(503, ErrorCode.Unavailable, 'a backing service is unavailable; retry shortly', { headers: retryAfter(after ?? 5), unexpected: true });
    default: break;
  }
  const status = STATUS[code];
  if (status === undefined || !isHookstreamError(e)) {
    return render(500, ErrorCode.Internal, 'internal error; quote the x-request-id header when reporting it', { unexpected: true });
  }
  const headers: Record<string, string> = {
    ...(code === ErrorCode.Unauthorized ? { 'www-authenticate': 'Bearer' } : {}),
    ...(after !== undefined ? retryAfter(after) : {}),
  };
  if (isQuotaExceeded(e)) {
    const r = render(after === undefined ? status : 429, code, e.message, { headers });
    r.body.error.limit = e.limit;
    return r;
  }
  return render(status, code, e.message, { details: e.details, headers });
}

export const newRequestId = (): string => `req_${newIdBody()}`;

// An id the caller sent is kept (it ties their logs to ours) when it is short and plain.
export const CALLER_REQUEST_ID = /^[A-Za-z0-9._:-]{1,100}$/;

/**
 * Outermost middleware: gives every request an x-request-id, turns thrown errors and the router's
 * bare 404/405/501 answers into the envelope, and logs unexpected failures.
 */
export function errorEnvelope(log: Logger): Middleware<ApiState> {
  return async (ctx, next) => {
    const sent = ctx.get('x-request-id');
    const requestId = CALLER_REQUEST_ID.test(sent) ? sent : newRequestId();
    ctx.state.requestId = requestId;
    ctx.set('x-request-id', requestId);
    let failure: RenderedError | undefined;
    try {
      await next();
      if (ctx.body === undefined || ctx.body === null) {
        // The router answers a known path with a method it lacks with a bare 405 (or 501 for a method it
        // does not know at all); both are the same mistake to a caller, so both are 405 with Allow.
        if (ctx.status === 405 || ctx.status === 501) {
          failure = render(405, ErrorCode.MethodNotAllowed, `${ctx.method} is not allowed here; allowed: ${ctx.response.get('allow') || 'none'}`);
        } else if (ctx.status === 404) {
          failure = render(404, ErrorCode.NotFound, 'no such route');
        }
      }
    } catch (e) {
      failure = renderError(e);
      if (failure.unexpected) {
        log.error('request failed', {
          request_id: requestId, method: ctx.method, path: ctx.path.slice(0, 200), status: failure.status,
          reason: e instanceof Error ? e.message : String(e), stack: e instanceof Error ? (e.stack ?? null) : null,
        });
      }
    }
    if (failure) {
      ctx.status = failure.status;
      for (const [name, value] of Object.entries(failure.headers)) ctx.set(name, value);
      ctx.body = failure.body;
    }
  };
}
