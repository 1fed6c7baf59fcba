// Bearer API key authentication: every route except the public ones (health checks) needs a key of
// some tenant, and the tenant found here is the only tenant the request can see or change.
import type { Middleware } from 'koa';
import { authenticate } from '../apikeys/store.ts';
import { unauthorized } from './errors.ts';
import type { ApiState } from './state.ts';

const BEARER = /^\s*Bearer\s+(\S+)\s*$/i;

/** Deny by default: a path not listed here needs a key, even one that matches no route. */
export function requireApiKey(publicPaths: ReadonlySet<string>): Middleware<ApiState> {
  return async (ctx, next) => {
    if (publicPaths.has(ctx.path)) return next();
    const header = ctx.get('authorization');
    if (!header) throw unauthorized('missing Authorization header; send Authorization: Bearer <API key>');
    const match = BEARER.exec(header);
    if (!match) throw unauthorized('malformed Authorization header; send Authorization: Bearer <API key>');
    // Unknown and revoked keys get the same answer: a caller learns nothing about keys it does not hold.
    const principal = await authenticate(ctx.state.em, match[1]!);
    if (!principal) throw unauthorized('invalid or revoked API key');
    ctx.state.tenant = principal.tenant;
    ctx.state.keyId = principal.keyId;
    return next();
  };
}
