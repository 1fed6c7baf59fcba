// Failed authentication is cheap to refuse: a source address (or a key prefix) that failed too often is
// answered 429 before the credential is looked up, so a flood of bad keys or cookies costs no database
// work and no other tenant's latency. Only failures count: a good key is never slowed, however busy its
// client; and a credential that worked lately is let through even from a throttled source (clients behind
// one proxy or NAT with an attacker keep working). The tables are bounded (rate-limit.ts, MAX_BUCKETS;
// RECENT_GOOD), whatever addresses and prefixes an attacker varies.
import { createHash } from 'node:crypto';
import { isIP } from 'node:net';
import { createRateLimiter, type Take } from './rate-limit.ts';

export interface FailureThrottle {
  /** Whether this credential may be tried now from `source`; costs no work and takes nothing. */
  check(source: string, credential: string | undefined, prefix?: string): Take;
  /** One failed try of these callers. */
  failed(source: string, prefix?: string): void;
  /** The credential worked: it passes a throttled source for a while. */
  succeeded(credential: string): void;
}

/** Credentials that worked, remembered (as digests) for this long, this many at most. */
const RECENT_GOOD_MS = 10 * 60_000;
const RECENT_GOOD = 10_000;

/** Failures a source may make at once, then one a second (and the same per key prefix). */
export const FAILURE_BURST = 20;
export const FAILURES_PER_SECOND = 1;

export function createFailureThrottle(opts: { burst?: number; perSecond?: number; now?: () => number } = {}): FailureThrottle {
  const burst = opts.burst ?? FAILURE_BURST;
  const perSecond = opts.perSecond ?? FAILURES_PER_SECOND;
  const sources = createRateLimiter({ perSecond, burst, now: opts.now });
  const prefixes = createRateLimiter({ perSecond, burst, now: opts.now });
  const now = opts.now ?? (() => performance.now());
  // Digest → when it last worked; insertion order is age order (a success moves it to the end).
  const good = new Map<string, number>();
  const digest = (credential: string) => createHash('sha256').update(credential).digest('base64');
  return {
    check(source, credential, prefix) {
      if (credential !== undefined) {
        const at = good.get(digest(credential));
        if (at !== undefined && now() - at < RECENT_GOOD_MS) return { ok: true };
      }
      const s = sources.peek(sourceOf(source));
      if (!s.ok || prefix === undefined) return s;
      return prefixes.peek(prefix);
    },
    failed(source, prefix) {
      sources.take(sourceOf(source));
      if (prefix !== undefined) prefixes.take(prefix);
    },
    succeeded(credential) {
      const d = digest(credential);
      good.delete(d);
      if (good.size >= RECENT_GOOD) good.delete(good.keys().next().value!);
      good.set(d, now());
    },
  };
}

/**
 * The unit a client controls: an IPv4 address, or an IPv6 /64 (one host is commonly given a whole /64, so
 * counting single IPv6 addresses would let it try for ever).
 */
export function sourceOf(ip: string): string {
  const v4 = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (v4) return v4[1]!;
  if (isIP(ip) !== 6) return ip;
  const [head = '', tail = ''] = ip.toLowerCase().split('::');
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const groups = ip.includes('::') ? [...left, ...Array(8 - left.length - right.length).fill('0'), ...right] : left;
  return `${groups.slice(0, 4).map((g) => g.replace(/^0+(?=.)/, '')).join(':')}::/64`;
}
