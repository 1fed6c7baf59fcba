// Failures that only exist at the HTTP edge (authentication, media types, body size, rate limits), as
// HookstreamErrors of the one vocabulary (src/errors.ts); envelope.ts maps every code to its status.
import { ErrorCode, HookstreamError } from '../errors.ts';

export const unauthorized = (message: string) => new HookstreamError(ErrorCode.Unauthorized, message);
export const rateLimited = (retryAfterSeconds: number) =>
  new HookstreamError(ErrorCode.RateLimited, `too many requests for this API key; retry in ${retryAfterSeconds} s`, { retryAfterSeconds });
export const authThrottled = (retryAfterSeconds: number) =>
  new HookstreamError(ErrorCode.RateLimited, `too many failed authentications from this address or for this key; retry in ${retryAfterSeconds} s`, { retryAfterSeconds });
export const unsupportedMediaType = (message = 'request bodies must be JSON (content-type: application/json)') =>
  new HookstreamError(ErrorCode.UnsupportedMediaType, message);
export const payloadTooLarge = (message: string) => new HookstreamError(ErrorCode.PayloadTooLarge, message);
