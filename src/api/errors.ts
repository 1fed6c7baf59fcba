// Failures that only exist at the HTTP edge (authentication, media types, body size, rate limits), as
// HookstreamErrors of the one vocabulary (src/errors.ts); envelope.ts maps every code to its status.
import { ErrorCode, HookstreamError } from '../errors.ts';

/**
 * A refusal that is part of normal traffic (a bad key, a rate, a quota), made without a stack trace: under a
 * flood, capturing stacks through Koa's middleware took 5 % of the process, and the envelope never shows
 * or logs them (only unexpected errors are logged, with theirs).
 */
export function withoutStack<T>(make: () => T): T {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return make();
  } finally {
    Error.stackTraceLimit = limit;
  }
}

export const rateLimitedMessage = (retryAfterSeconds: number) => `too many requests for this API key; retry in ${retryAfterSeconds} s`;
export const authThrottledMessage = (retryAfterSeconds: number) =>
  `too many failed authentications from this address or for this key; retry in ${retryAfterSeconds} s`;

export const unauthorized = (message: string) => withoutStack(() => new HookstreamError(ErrorCode.Unauthorized, message));
export const rateLimited = (retryAfterSeconds: number) =>
  withoutStack(() => new HookstreamError(ErrorCode.RateLimited, rateLimitedMessage(retryAfterSeconds), { retryAfterSeconds }));
export const authThrottled = (retryAfterSeconds: number) =>
  withoutStack(() => new HookstreamError(ErrorCode.RateLimited, authThrottledMessage(retryAfterSeconds), { retryAfterSeconds }));
export const unsupportedMediaType = (message = 'request bodies must be JSON (content-type: application/json)') =>
  new HookstreamError(ErrorCode.UnsupportedMediaType, message);
export const payloadTooLarge = (message: string) => new HookstreamError(ErrorCode.PayloadTooLarge, message);
