// Floods refused before Koa. A request over its API key's rate, or from a source that failed authentication
// too often (without a credential that worked lately), is answered from the raw node:http handler with the
// 429 the middleware would give (the same envelope, retry-after and x-request-id): no Koa context, no
// error object or stack, no log line. Under a flood these are nearly all the requests, and going through
// Koa they took the CPU every other tenant's requests needed. This only looks (peek, check): it takes no
// token and counts no failure, so what it lets through meets the middleware (rate-limit.ts, auth.ts),
// which decides exactly as before. A connection that keeps asking without waiting its retry-after gets
// its next refusals only once that time has passed (IGNORED_WITHIN_MS).
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { isWellFormedKey, keyPrefix } from '../apikeys/key.ts';
import { activeTraceFields, TRACE_ID_HEADER, tracing } from '../telemetry/tracing.ts';
import { presentedKey } from './auth.ts';
import type { FailureThrottle } from './auth-throttle.ts';
import { CALLER_REQUEST_ID, newRequestId } from './envelope.ts';
import { authThrottledMessage, rateLimitedMessage } from './errors.ts';
import { keyDigest, type RateLimiter } from './rate-limit.ts';

/** Answers `req` when it is refused here (true); false: Koa handles it. */
export type RefuseEarly = (req: IncomingMessage, res: ServerResponse) => boolean;

/** Bodies kept, by message (one per retry-after value in practice). */
const MAX_BODIES = 64;
/**
 * A connection refused here again within this long after its last 429 ignored that 429's retry-after (at
 * least 1 s): its refusals are held until their retry-after (HOLD_MS at most) before they are sent. A
 * client that loops without waiting then makes one request a second per connection instead of thousands;
 * one that waits as told is never held.
 */
export const IGNORED_WITHIN_MS = 1000;
export const HOLD_MS = 1000;
/** Refusals held at once, at most; past it they are sent at once (holding costs a timer and a socket). */
export const MAX_HELD = 1000;

/**
 * When a connection's refusals are sent: at once, or (it asked again within IGNORED_WITHIN_MS of its last
 * 429, ignoring that 429's retry-after) once the retry-after has passed, HOLD_MS at most. Shared by the
 * refusals here and the 429s Koa answers (a tenant's writes a second), so a client looping on either is
 * slowed alike.
 */
export interface RefusalHolds {
  /** Calls `send` now or after the hold; `send` should do nothing when the client has gone. */
  refuse(socket: Socket, retryAfterSeconds: number, send: () => void): void;
}

export function createRefusalHolds(deps: { now?: () => number; hold?: (send: () => void, ms: number) => void } = {}): RefusalHolds {
  const now = deps.now ?? (() => performance.now());
  const hold = deps.hold ?? ((send, ms) => void setTimeout(send, ms));
  /** When each connection was last sent a refusal. */
  const refusedAt = new WeakMap<Socket, number>();
  let held = 0;
  return {
    refuse(socket, retryAfterSeconds, send) {
      const sent = () => {
        refusedAt.set(socket, now());
        send();
      };
      const last = refusedAt.get(socket);
      if (last === undefined || now() - last >= IGNORED_WITHIN_MS || held >= MAX_HELD) return sent();
      held++;
      hold(() => { held--; sent(); }, Math.min(HOLD_MS, retryAfterSeconds * 1000));
    },
  };
}

export function createEarlyRefusal(deps: {
  limiter: RateLimiter;
  throttle: FailureThrottle | undefined;
  publicPaths: ReadonlySet<string>;
  onThrottled?: () => void;
  holds?: RefusalHolds;
}): RefuseEarly {
  const holds = deps.holds ?? createRefusalHolds();
  const bodies = new Map<string, Buffer>();
  const bodyOf = (message: string) => {
    let b = bodies.get(message);
    if (!b) {
      if (bodies.size >= MAX_BODIES) bodies.clear();
      b = Buffer.from(JSON.stringify({ error: { code: 'rate_limited', message, details: [] } }));
      bodies.set(message, b);
    }
    return b;
  };
  const answer = (req: IncomingMessage, res: ServerResponse, retryAfterSeconds: number, message: string) => {
    const sent = req.headers['x-request-id'];
    const body = bodyOf(message);
    const headers = [
      'content-type', 'application/json; charset=utf-8', 'content-length', String(body.length), 'retry-after', String(retryAfterSeconds),
      'x-request-id', typeof sent === 'string' && CALLER_REQUEST_ID.test(sent) ? sent : newRequestId(),
    ];
    const trace = tracing.on ? activeTraceFields() : undefined;
    if (trace) headers.push(TRACE_ID_HEADER, trace.trace_id);
    const { socket } = req;
    holds.refuse(socket, retryAfterSeconds, () => {
      // The client gave up while its refusal was held.
      if (socket.destroyed) return;
      res.writeHead(429, headers);
      res.end(req.method === 'HEAD' ? undefined : body);
    });
    return true;
  };

  return (req, res) => {
    const url = req.url ?? '';
    // Only origin-form paths the API's middleware would limit: anything odd, the portal's pages (their
    // own limits) and the public paths are Koa's.
    if (url.charCodeAt(0) !== 47 /* / */) return false;
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (deps.publicPaths.has(path) || path === '/portal' || path.startsWith('/portal/')) return false;
    const header = req.headers.authorization ?? '';
    const presented = presentedKey(header);
    const wellFormed = presented !== undefined && isWellFormedKey(presented);
    if (wellFormed) {
      const rate = deps.limiter.peek(keyDigest(presented));
      if (!rate.ok) return answer(req, res, rate.retryAfterSeconds, rateLimitedMessage(rate.retryAfterSeconds));
    }
    if (!deps.throttle) return false;
    const admitted = deps.throttle.check(req.socket.remoteAddress ?? '', presented, wellFormed ? keyPrefix(presented) : undefined);
    if (admitted.ok) return false;
    deps.onThrottled?.();
    return answer(req, res, admitted.retryAfterSeconds, authThrottledMessage(admitted.retryAfterSeconds));
  };
}
