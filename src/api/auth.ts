// Bearer API key authentication: every route except the public ones (health checks) needs a key of
// some tenant, and the tenant found here is the only tenant the request can see or change.
import type { Middleware } from 'koa';
import { authenticate } from '../apikeys/store.ts';
import { isWellFormedKey, keyPrefix } from '../apikeys/key.ts';
import type { FailureThrottle } from './auth-throttle.ts';
import { authThrottled, unauthorized } from './errors.ts';
import type { ApiState } from './state.ts';

const BEARER = /^\s*Bearer\s+(\S+)\s*$/i;

/** The credential of an Authorization header, unchecked; undefined when there is none. */
export const presentedKey = (header: string): string | undefined => (header ? BEARER.exec(header)?.[1] : undefined);

/**
 * Deny by default: a path not listed here needs a key, even one that matches no route. A source address or
 * key prefix that failed too often is refused (429) before the key is looked up.
 */
export function requireApiKey(publicPaths: ReadonlySet<string>, throttle?: FailureThrottle, onThrottled?: () => void): Middleware<ApiState> {
  return async (ctx, next) => {
    if (publicPaths.has(ctx.path)) return next();
    const header = ctx.get('authorization');
    const presented = presentedKey(header);
    const prefix = presented !== undefined && isWellFormedKey(presented) ? keyPrefix(presented) : undefined;
    const admitted = throttle?.check(ctx.ip, presented, prefix);
    if (admitted && !admitted.ok) {
      onThrottled?.();
      throw authThrottled(admitted.retryAfterSeconds);
    }
    const refuse = (message: string) => {
      throttle?.failed(ctx.ip, prefix);
      return unauthorized(message);
    };
    if (!header) throw refuse('missing Authorization header; send Authorization: Bearer <API key>');
    if (presented === undefined) throw refuse('malformed Authorization header; send Authorization: Bearer <API key>');
    // Unknown and revoked keys get the same answer: a caller learns nothing about keys it does not hold.
    const principal = await authenticate(ctx.state.em, presented);
    if (!principal) throw refuse('invalid or revoked API key');
    throttle?.succeeded(presented);
    ctx.state.tenant = principal.tenant;
    ctx.state.keyId = principal.keyId;
    return next();
  };
}
