// RATE_LIMIT_<b>: rate tokens, one message per attempt started on `rate_limit.<b>.<endpointId>`. The stream
// keeps at most b per subject, refuses the next one (discard new per subject) and lets each go after the
// window: a delivery role stores a token before each attempt, so across every instance no window holds more
// attempts than the endpoint's tokens (issue 17; it was the consumer's max_ack_pending before, which a failed
// delivery held through its whole backoff).
// nats-server 2.9 applies max_msgs_per_subject per stream, so b is a power of two and a limit of n uses one
// subject in each bucket of the bits of n (1000 = 512 + 256 + 128 + 64 + 32 + 8): at most n tokens a window,
// and at most 14 streams for limits of 1 to 10,000, whatever limits the tenants choose. Created on first use.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, type EnsureOptions } from './ensure.ts';

/**
 * A token's life: the limit's second, plus what covers the jitter between an attempt's start and the
 * receiver seeing it (measured on loopback: a few ms), so the receiver never sees more in any second.
 */
export const RATE_WINDOW_MS = 1050;

export const rateLimitStream = (bucket: number) => `RATE_LIMIT_${bucket}`;
export const rateLimitSubject = (bucket: number, endpointId: string) => `rate_limit.${bucket}.${endpointId}`;

/** The buckets (powers of two) whose tokens add up to a limit of `perSecond`, largest first. */
export function rateBuckets(perSecond: number): number[] {
  const out: number[] = [];
  for (let b = 2 ** Math.floor(Math.log2(perSecond)); b >= 1; b /= 2) if (perSecond & b) out.push(b);
  return out;
}

/** A RATE_LIMIT_<n> stream of an earlier version, whose n is not a bucket (a power of two): no longer used. */
export const isRetiredRateLimitStream = (name: string): boolean => {
  const m = /^RATE_LIMIT_(\d+)$/.exec(name);
  if (!m) return false;
  const n = Number(m[1]);
  return n < 1 || (n & (n - 1)) !== 0;
};

export async function ensureRateLimitStream(jsm: JetStreamManager, bucket: number, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: rateLimitStream(bucket),
    subjects: [`rate_limit.${bucket}.*`],
    retention: RetentionPolicy.Limits,
    // Tokens are worth a second: memory, and a restart forgets them (the limit is loose for one second at most).
    storage: StorageType.Memory,
    max_age: nanos(RATE_WINDOW_MS),
    max_msgs_per_subject: bucket,
    discard: DiscardPolicy.New,
    discard_new_per_subject: true,
  }, opts);
}
