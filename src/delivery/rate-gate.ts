// Before each attempt to a rate-limited endpoint, one token from one of its limit's buckets
// (streams/rate-limits.ts), the largest first: stored means go; refused by every bucket means the window
// is full, and the delivery waits in its lane. A refusal closes the endpoint's gate in this process for a moment, so lanes waiting for a
// token do not all ask at once.
import type { JetStreamManager } from '@nats-io/jetstream';
import { ensureRateLimitStream, isRetiredRateLimitStream, rateBuckets, rateLimitSubject } from '../../streams/rate-limits.ts';
import type { EndpointId } from '../domain/ids.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import { PublishRejectedError, type AckedPublisher } from '../nats/acked-publisher.ts';

/** nats-server's "maximum messages per subject exceeded": the window is full. */
const WINDOW_FULL = 10077;
/** No stream for the subject: the limit's stream is created on first use. */
const NO_STREAM = 503;
/** Asking again after a refusal: about the time one token takes to free, within these bounds. */
const MIN_PAUSE_MS = 10;
const MAX_PAUSE_MS = 200;
/** After any other failure (NATS away): the delivery keeps waiting, never goes out unmetered. */
const TROUBLE_PAUSE_MS = 1000;

export interface RateGates {
  /** Resolves true once a token is taken; false when `cancelled()` says the delivery no longer waits. */
  acquire(endpoint: EndpointId, perSecond: number, cancelled: () => boolean): Promise<boolean>;
  /** The endpoint was deleted. */
  forget(endpoint: EndpointId): void;
}

export function createRateGates(deps: { jsm: JetStreamManager; publisher: AckedPublisher; replicas?: number; log: Logger }): RateGates {
  const closedUntil = new Map<EndpointId, number>();
  void removeRetiredStreams(deps.jsm).catch((e: unknown) => deps.log.warn('could not remove the rate-limit streams an earlier version left', { reason: describe(e) }));
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  return {
    async acquire(endpoint, perSecond, cancelled) {
      const buckets = rateBuckets(perSecond);
      for (;;) {
        if (cancelled()) return false;
        const wait = (closedUntil.get(endpoint) ?? 0) - performance.now();
        if (wait > 0) { await sleep(wait); continue; }
        let pause = Math.min(MAX_PAUSE_MS, Math.max(MIN_PAUSE_MS, 1000 / perSecond));
        for (let i = 0; i < buckets.length; i++) {
          const bucket = buckets[i]!;
          try {
            await deps.publisher.publish(rateLimitSubject(bucket, endpoint), '');
            closedUntil.delete(endpoint);
            return true;
          } catch (err) {
            let e = err;
            const code = e instanceof PublishRejectedError ? e.code : undefined;
            if (code === WINDOW_FULL) continue;
            if (code === NO_STREAM) {
              try {
                await ensureRateLimitStream(deps.jsm, bucket, deps.replicas === undefined ? undefined : { replicas: deps.replicas });
                i--;
                continue;
              } catch (err) {
                e = err;
              }
            }
            deps.log.warn('could not take a rate-limit token; the delivery waits', { endpoint, reason: describe(e) });
            pause = TROUBLE_PAUSE_MS;
            break;
          }
        }
        closedUntil.set(endpoint, performance.now() + pause);
      }
    },
    forget: (endpoint) => void closedUntil.delete(endpoint),
  };
}

/** An earlier version made a RATE_LIMIT_<n> stream for every limit in use; their tokens are a second's worth. */
async function removeRetiredStreams(jsm: JetStreamManager): Promise<void> {
  const retired: string[] = [];
  for await (const si of jsm.streams.list('rate_limit.>')) if (isRetiredRateLimitStream(si.config.name)) retired.push(si.config.name);
  for (const name of retired) await jsm.streams.delete(name);
}
