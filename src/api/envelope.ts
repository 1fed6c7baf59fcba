// The one place where a failure becomes an HTTP answer: every error, thrown anywhere below, leaves as
// {"error": {"code", "message", "details"}} with the status of its kind. Unexpected errors answer a
// bare 500 (no message, no stack, nothing that could hold a secret) and are logged with the request id.
import type { Middleware } from 'koa';
import { ErrorCode, isHookstreamError, type FieldError } from '../errors.ts';
import { isPostgresUnavailable } from '../db/orm.ts';
import { newIdBody } from '../domain/ids.ts';
import type { Logger } from '../log.ts';
import { ApiError, ApiErrorCode } from './errors.ts';
import type { ApiState } from './state.ts';

export interface ErrorBody {
  error: { code: ApiErrorCode; message: string; details: FieldError[] };
}

export interface RenderedError {
  status: number;
  body: ErrorBody;
  headers: Record<string, string>;
  /** A bug or an outage rather than a bad request: logged with its stack. */
  unexpected: boolean;
}

const render = (status: number, code: ApiErrorCode, message: string, opts: { details?: FieldError[]; headers?: Record<string, string>; unexpected?: boolean } = {}): RenderedError => ({
  status,
  body: { error: { code, message, details: opts.details ?? [] } },
  headers: opts.headers ?? {},
  unexpected: opts.unexpected ?? false,
});

export function renderError(e: unknown): RenderedError {
  if (e instanceof ApiError) return render(e.status, e.code, e.message, { details: e.details, headers: e.headers });
  if (isHookstreamError(e)) {
    switch (e.code) {
      case ErrorCode.Unavailable:
        return render(503, ApiErrorCode.Unavailable, 'the service is catching up; retry shortly', { headers: { 'retry-after': String(e.retryAfterSeconds ?? 1) }, unexpected: true });
      case ErrorCode.NotFound: return render(404, ApiErrorCode.NotFound, e.message);
      case ErrorCode.Conflict: return render(409, ApiErrorCode.Conflict, e.message);
      case ErrorCode.ValidationFailed: return render(422, ApiErrorCode.ValidationFailed, e.message, { details: e.details });
      case ErrorCode.BadRequest: return render(400, ApiErrorCode.BadRequest, e.message, { details: e.details });
      case ErrorCode.Unreachable:
        return render(503, ApiErrorCode.Unavailable, 'a backing service is unavailable; retry shortly', { headers: { 'retry-after': '5' }, unexpected: true });
      default: break;
    }
  }
  // Postgres down or restarting: the driver's own error, which no layer above turned into ours.
  if (isPostgresUnavailable(e)) {
    return render(503, ApiErrorCode.Unavailable, 'a backing service is unavailable; retry shortly', { headers: { 'retry-after': '5' }, unexpected: true });
  }
  return render(500, ApiErrorCode.Internal, 'internal error; quote the x-request-id header when reporting it', { unexpected: true });
}

export const newRequestId = (): string => `req_${newIdBody()}`;

// An id the caller sent is kept (it ties their logs to ours) when it is short and plain.
const CALLER_REQUEST_ID = /^[A-Za-z0-9._:-]{1,100}$/;

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
          failure = render(405, ApiErrorCode.MethodNotAllowed, `${ctx.method} is not allowed here; allowed: ${ctx.response.get('allow') || 'none'}`);
        } else if (ctx.status === 404) {
          failure = render(404, ApiErrorCode.NotFound, 'no such route');
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
