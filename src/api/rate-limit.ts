// Per-API-key rate limiting with a token bucket: a key may burst up to one second's worth of
// requests, then gets `perSecond` a second. Buckets live in this process; with several API instances
// each enforces its own share, which keeps the limiter free of a shared store.
import type { Middleware } from 'koa';
import { createHash } from 'node:crypto';
import { isWellFormedKey } from '../apikeys/key.ts';
import { presentedKey } from './auth.ts';
import { rateLimited } from './errors.ts';
import type { ApiState } from './state.ts';

export type Take = { ok: true } | { ok: false; retryAfterSeconds: number };

export interface RateLimiter {
  /** One token of `key`'s bucket; `perSecond` replaces the limiter's rate (and burst) for this key. */
  take(key: string, perSecond?: number): Take;
  /** Whether `key` has a token, without taking it. */
  peek(key: string): Take;
  /** Buckets held now (bounded: see SWEEP_EVERY). */
  size(): number;
}

interface Bucket {
  tokens: number;
  at: number;
  /** Tokens a millisecond, and the most a bucket holds. */
  rate: number;
  burst: number;
}

/** Buckets that have refilled completely are forgotten every this many calls, so memory follows active keys. */
const SWEEP_EVERY = 1000;
/**
 * The most buckets held: keys an attacker chooses (source addresses, key prefixes) cannot grow the table
 * past it; the oldest go first (a forgotten bucket starts full, so the limit only loosens for them).
 */
export const MAX_BUCKETS = 100_000;

export function createRateLimiter(opts: { perSecond: number; burst?: number; now?: () => number; maxBuckets?: number }): RateLimiter {
  const now = opts.now ?? (() => performance.now());
  const maxBuckets = opts.maxBuckets ?? MAX_BUCKETS;
  const buckets = new Map<string, Bucket>();
  let calls = 0;

  const full = (b: Bucket, t: number) => b.tokens + (t - b.at) * b.rate >= b.burst;
  const refill = (b: Bucket, t: number) => {
    b.tokens = Math.min(b.burst, b.tokens + (t - b.at) * b.rate);
    b.at = t;
  };

  return {
    take(key, perSecond) {
      const t = now();
      if (++calls % SWEEP_EVERY === 0) {
        for (const [k, b] of buckets) if (full(b, t)) buckets.delete(k);
      }
      const rate = (perSecond ?? opts.perSecond) / 1000;
      const burst = perSecond ?? opts.burst ?? opts.perSecond;
      let b = buckets.get(key);
      if (!b) {
        if (buckets.size >= maxBuckets) buckets.delete(buckets.keys().next().value!);
        buckets.set(key, (b = { tokens: burst, at: t, rate, burst }));
      } else {
        refill(b, t);
        // A changed limit applies from now on.
        b.rate = rate;
        b.burst = burst;
        b.tokens = Math.min(b.tokens, burst);
      }
      if (b.tokens >= 1) {
        b.tokens -= 1;
        return { ok: true };
      }
      if (rate <= 0) return { ok: false, retryAfterSeconds: 60 };
      return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - b.tokens) / rate / 1000)) };
    },
    peek(key) {
      const b = buckets.get(key);
      if (!b) return { ok: true };
      const tokens = Math.min(b.burst, b.tokens + (now() - b.at) * b.rate);
      if (tokens >= 1) return { ok: true };
      return { ok: false, retryAfterSeconds: b.rate <= 0 ? 60 : Math.max(1, Math.ceil((1 - tokens) / b.rate / 1000)) };
    },
    size: () => buckets.size,
  };
}

/** The bucket of a presented API key: its digest, so the table holds no key. */
export const keyDigest = (presented: string): string => createHash('sha256').update(presented).digest('base64');

/**
 * 429 with retry-after once the presented key has spent its tokens, before the key is looked up: a flood
 * over the limit costs no database work. Buckets are kept by the key's digest; public paths are not limited.
 */
export function rateLimitByKey(limiter: RateLimiter, publicPaths: ReadonlySet<string>): Middleware<ApiState> {
  return async (ctx, next) => {
    if (publicPaths.has(ctx.path)) return next();
    const presented = presentedKey(ctx.get('authorization'));
    if (presented !== undefined && isWellFormedKey(presented)) {
      const taken = limiter.take(keyDigest(presented));
      if (!taken.ok) throw rateLimited(taken.retryAfterSeconds);
    }
    return next();
  };
}
