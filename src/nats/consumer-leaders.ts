// Re-pulls when a consumer elects a leader (a NATS server lost on a cluster). A pull request waits at the
// consumer's leader, so one made before the election is gone with the old leader; nats.js notices only
// after two missed heartbeats (60 s with the delivery role's 30 s heartbeats), and until then that
// endpoint, or the router, gets nothing (the fault suite measured pauses of 20-83 s). The advisory that
// JetStream publishes on every consumer leader election ends that pause with a fresh pull.
import type { ConsumerMessages } from '@nats-io/jetstream';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';

/** `$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.<stream>.<consumer>`; the service user may subscribe to it (nats.conf). */
export const LEADER_ELECTED_PREFIX = '$JS.EVENT.ADVISORY.CONSUMER.LEADER_ELECTED.';
const SUMMARY_MS = 1000;
const CANNOT_FOLLOW = 'cannot follow consumer leader elections; a lost pull is renewed after missed heartbeats';

export interface ConsumerLeaders {
  /** Re-pull `messages` (a nats.js consume()) whenever `stream`'s consumer `consumer` elects a leader; returns the undo. */
  track(stream: string, consumer: string, messages: ConsumerMessages): () => void;
  /** Call `repull` (a pull feed's, src/nats/pull-feed.ts) whenever the consumer elects a leader; returns the undo. */
  follow(stream: string, consumer: string, repull: () => void): () => void;
  stop(): void;
}

/**
 * nats.js 3 gives a consume() no public way to pull again; its implementation's resetPending() is what
 * it runs itself after missed heartbeats (forget what the lost requests asked for, pull afresh).
 */
function pullAgain(messages: ConsumerMessages): Promise<boolean> | undefined {
  const impl = messages as ConsumerMessages & Partial<{ resetPending(): Promise<boolean> }>;
  return typeof impl.resetPending === 'function' ? impl.resetPending() : undefined;
}

export function watchConsumerLeaders(nc: NatsConnection, deps: { log: Logger; metrics: ServiceMetrics }): ConsumerLeaders {
  const { log, metrics } = deps;
  /** By `<stream>.<consumer>`: pull again, and say whether a pull was made. */
  const tracked = new Map<string, () => boolean | Promise<boolean>>();
  const key = (stream: string, consumer: string) => `${stream}.${consumer}`;
  // A lost server moves the leaders of thousands of endpoint consumers at once: one line a second says how many.
  let renewed = 0;
  let summary: NodeJS.Timeout | undefined;
  const counted = () => {
    renewed++;
    summary ??= setTimeout(() => {
      log.info('pulled again after consumer leader elections', { consumers: renewed });
      renewed = 0;
      summary = undefined;
    }, SUMMARY_MS);
  };

  let sub: Subscription | undefined;
  try {
    sub = nc.subscribe(`${LEADER_ELECTED_PREFIX}>`, {
      callback: (err, m) => {
        if (err) {
          // A nats.conf from before this permission: pulls are then renewed after missed heartbeats only.
          log.warn(CANNOT_FOLLOW, { reason: describe(err) });
          return;
        }
        const repull = tracked.get(m.subject.slice(LEADER_ELECTED_PREFIX.length));
        if (!repull) return;
        // Counted only when a pull was made again (a consume() without resetPending() makes none).
        Promise.resolve(repull()).then((pulled) => {
          if (!pulled) return;
          metrics.consumerRepulls.inc();
          counted();
        }, (e: unknown) => log.warn('could not pull again after a leader election', { subject: m.subject, reason: describe(e) }));
      },
    });
  } catch (e) {
    log.warn(CANNOT_FOLLOW, { reason: describe(e) });
  }

  function follow(stream: string, consumer: string, repull: () => boolean | Promise<boolean>): () => void {
    const k = key(stream, consumer);
    tracked.set(k, repull);
    return () => {
      if (tracked.get(k) === repull) tracked.delete(k);
    };
  }

  return {
    track(stream, consumer, messages) {
      return follow(stream, consumer, () => pullAgain(messages) ?? false);
    },
    follow(stream, consumer, repull) {
      return follow(stream, consumer, () => { repull(); return true; });
    },
    stop() {
      clearTimeout(summary);
      sub?.unsubscribe();
      tracked.clear();
    },
  };
}
