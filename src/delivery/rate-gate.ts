// Before each attempt to a rate-limited endpoint, one token from its RATE_LIMIT stream
// (streams/rate-limits.ts): stored means go; refused means the window is full, and the delivery waits in
// its lane. A refusal closes the endpoint's gate in this process for a moment, so lanes waiting for a
// token do not all ask at once.
import type { JetStreamManager } from '@nats-io/jetstream';
import { ensureRateLimitStream, rateLimitSubject } from '../../streams/rate-limits.ts';
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
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  return {
    async acquire(endpoint, perSecond, cancelled) {
      const subject = rateLimitSubject(perSecond, endpoint);
      for (;;) {
        if (cancelled()) return false;
        const wait = (closedUntil.get(endpoint) ?? 0) - performance.now();
        if (wait > 0) { await sleep(wait); continue; }
        try {
          await deps.publisher.publish(subject, '');
          closedUntil.delete(endpoint);
          return true;
        } catch (err) {
          let e = err;
          const code = e instanceof PublishRejectedError ? e.code : undefined;
          if (code === WINDOW_FULL) {
            closedUntil.set(endpoint, performance.now() + Math.min(MAX_PAUSE_MS, Math.max(MIN_PAUSE_MS, 1000 / perSecond)));
            continue;
          }
          if (code === NO_STREAM) {
            try {
              await ensureRateLimitStream(deps.jsm, perSecond, deps.replicas === undefined ? undefined : { replicas: deps.replicas });
              continue;
            } catch (err) {
              e = err;
            }
          }
          deps.log.warn('could not take a rate-limit token; the delivery waits', { endpoint, reason: describe(e) });
          closedUntil.set(endpoint, performance.now() + TROUBLE_PAUSE_MS);
        }
      }
    },
    forget: (endpoint) => void closedUntil.delete(endpoint),
  };
}
