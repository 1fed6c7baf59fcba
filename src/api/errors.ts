// Failures that only exist at the HTTP edge (authentication, media types, rate limits...). Domain
// failures stay HookstreamErrors; envelope.ts maps both to a status in one place.
import type { FieldError } from '../errors.ts';

export const ApiErrorCode = {
  BadRequest: 'bad_request',
  Unauthorized: 'unauthorized',
  NotFound: 'not_found',
  MethodNotAllowed: 'method_not_allowed',
  Conflict: 'conflict',
  PayloadTooLarge: 'payload_too_large',
  UnsupportedMediaType: 'unsupported_media_type',
  ValidationFailed: 'validation_failed',
  RateLimited: 'rate_limited',
  Internal: 'internal_error',
  Unavailable: 'unavailable',
} as const;
export type ApiErrorCode = (typeof ApiErrorCode)[keyof typeof ApiErrorCode];

export class ApiError extends Error {
  readonly status: number;
  readonly code: ApiErrorCode;
  readonly details: FieldError[];
  readonly headers: Record<string, string>;
  constructor(status: number, code: ApiErrorCode, message: string, opts: { details?: FieldError[]; headers?: Record<string, string> } = {}) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.details = opts.details ?? [];
    this.headers = opts.headers ?? {};
  }
}

export const badRequest = (message: string, details?: FieldError[]) => new ApiError(400, ApiErrorCode.BadRequest, message, { details });
export const unauthorized = (message: string) =>
  new ApiError(401, ApiErrorCode.Unauthorized, message, { headers: { 'www-authenticate': 'Bearer' } });
export const rateLimited = (retryAfterSeconds: number) =>
  new ApiError(429, ApiErrorCode.RateLimited, `too many requests for this API key; retry in ${retryAfterSeconds} s`, {
    headers: { 'retry-after': String(retryAfterSeconds) },
  });
export const unsupportedMediaType = () =>
  new ApiError(415, ApiErrorCode.UnsupportedMediaType, 'request bodies must be JSON (content-type: application/json)');
