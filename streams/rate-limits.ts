// RATE_LIMIT_<n>: the tokens of every endpoint whose rate limit is n deliveries per second, one message per
// attempt started on `rate_limit.<n>.<endpointId>`. The stream keeps at most n per subject, refuses the
// next one (discard new per subject) and lets each go after the window: a delivery role publishes a token
// before each attempt, so across every instance no window holds more than n attempts (issue 17; it was
// the consumer's max_ack_pending before, which a failed delivery held through its whole backoff).
// One stream per limit in use, created on first use: nats-server 2.9 applies max_msgs_per_subject per stream.
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { nanos } from '@nats-io/nats-core';
import { ensureStream, type EnsureOptions } from './ensure.ts';

/**
 * A token's life: the limit's second, plus what covers the jitter between an attempt's start and the
 * receiver seeing it (measured on loopback: a few ms), so the receiver never sees more in any second.
 */
export const RATE_WINDOW_MS = 1050;

export const rateLimitStream = (perSecond: number) => `RATE_LIMIT_${perSecond}`;
export const rateLimitSubject = (perSecond: number, endpointId: string) => `rate_limit.${perSecond}.${endpointId}`;

export async function ensureRateLimitStream(jsm: JetStreamManager, perSecond: number, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: rateLimitStream(perSecond),
    subjects: [`rate_limit.${perSecond}.*`],
    retention: RetentionPolicy.Limits,
    // Tokens are worth a second: memory, and a restart forgets them (the limit is loose for one second at most).
    storage: StorageType.Memory,
    max_age: nanos(RATE_WINDOW_MS),
    max_msgs_per_subject: perSecond,
    discard: DiscardPolicy.New,
    discard_new_per_subject: true,
  }, opts);
}
