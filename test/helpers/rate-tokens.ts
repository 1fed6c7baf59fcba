// The rate-limit tokens NATS stored for an endpoint (streams/rate-limits.ts), with the server's own store
// times: what the limiter guarantees (no more than the limit in any second of the server's clock). Arrival
// times at a receiver in the test process are not: a stall of that process bunches two seconds of arrivals.
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { ensureRateLimitStream, rateBuckets, rateLimitStream, rateLimitSubject } from '../../streams/rate-limits.ts';

export interface RateTokens {
  /** Resolves once `count` tokens were seen (one per attempt made); rejects after `timeoutMs`. */
  waitFor(count: number, timeoutMs?: number): Promise<void>;
  /** The most tokens stored within any `windowMs` (server clock). */
  worstWindow(windowMs?: number): number;
  stop(): void;
}

/** Start before the first attempt: a token lives only about a second in its stream. */
export async function watchRateTokens(js: JetStreamClient, jsm: JetStreamManager, endpoint: string, perSecond: number): Promise<RateTokens> {
  /** Store times (ms, server clock) of the tokens seen so far. */
  const seen: number[] = [];
  const stops: (() => void)[] = [];
  for (const bucket of rateBuckets(perSecond)) {
    // The delivery role creates a bucket's stream on first use, with this same config.
    await ensureRateLimitStream(jsm, bucket);
    const consumer = await js.consumers.get(rateLimitStream(bucket), { filter_subjects: rateLimitSubject(bucket, endpoint) });
    const messages = await consumer.consume({ max_messages: 1000 });
    stops.push(() => void messages.stop());
    // A consumer that breaks off shows as tokens missing for attempts (the tests wait for one per attempt).
    void (async () => {
      for await (const m of messages) seen.push(Number(m.timestampNanos / 1_000_000n));
    })().catch(() => {});
  }
  return {
    async waitFor(count, timeoutMs = 5000) {
      for (const until = Date.now() + timeoutMs; seen.length < count;) {
        if (Date.now() > until) throw new Error(`${seen.length} rate-limit tokens seen, for ${count} attempts`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    worstWindow(windowMs = 1000) {
      const at = [...seen].sort((a, b) => a - b);
      let worst = 0;
      for (let i = 0, j = 0; i < at.length; i++) {
        while (at[i]! - at[j]! >= windowMs) j++;
        worst = Math.max(worst, i - j + 1);
      }
      return worst;
    },
    stop: () => { for (const s of stops) s(); },
  };
}
