// Per-API-key rate limiting with a token bucket: a key may burst up to one second's worth of
// requests, then gets `perSecond` a second. Buckets live in this process; with several API instances
// each enforces its own share, which keeps the limiter free of a shared store.
import type { Middleware } from 'koa';
import { rateLimited } from './errors.ts';
import type { ApiState } from './state.ts';

export type Take = { ok: true } | { ok: false; retryAfterSeconds: number };

export interface RateLimiter {
  take(key: string): Take;
}

interface Bucket {
  tokens: number;
  at: number;
}

/** Buckets that have refilled completely are forgotten every this many calls, so memory follows active keys. */
const SWEEP_EVERY = 1000;

export function createRateLimiter(opts: { perSecond: number; burst?: number; now?: () => number }): RateLimiter {
  const rate = opts.perSecond / 1000;
  const burst = opts.burst ?? opts.perSecond;
  const now = opts.now ?? (() => performance.now());
  const buckets = new Map<string, Bucket>();
  let calls = 0;

  const refill = (b: Bucket, t: number) => {
    b.tokens = Math.min(burst, b.tokens + (t - b.at) * rate);
    b.at = t;
  };

  return {
    take(key) {
      const t = now();
      if (++calls % SWEEP_EVERY === 0) {
        for (const [k, b] of buckets) if (b.tokens + (t - b.at) * rate >= burst) buckets.delete(k);
      }
      let b = buckets.get(key);
      if (!b) buckets.set(key, (b = { tokens: burst, at: t }));
      else refill(b, t);
      if (b.tokens >= 1) {
        b.tokens -= 1;
        return { ok: true };
      }
      return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - b.tokens) / rate / 1000)) };
    },
  };
}

/** 429 with retry-after once the caller's key has spent its tokens; public paths are not limited. */
export function rateLimitByKey(limiter: RateLimiter, publicPaths: ReadonlySet<string>): Middleware<ApiState> {
  return async (ctx, next) => {
    if (publicPaths.has(ctx.path)) return next();
    const taken = limiter.take(ctx.state.keyId);
    if (!taken.ok) throw rateLimited(taken.retryAfterSeconds);
    return next();
  };
}
