// The queue bound of an ordered endpoint (issue 21). A delivery stream's max_msgs_per_subject bounds one
// subject, which for an ordered endpoint is one key: the endpoint as a whole is bounded here instead, by
// its keyed consumer's backlog (pending + ack-pending) as last read, at most once a second per endpoint
// and never on the routing path. So the bound is approximate by up to a second or so of that endpoint's
// traffic; past it the router refuses a keyed delivery as JetStream refuses a full plain queue.
import type { JetStreamManager } from '@nats-io/jetstream';
import { deliveryAddress, keyedConsumerName } from '../../streams/deliveries.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';

const REFRESH_MS = 1000;
/** Entries not asked about for this long are dropped (endpoints switched back, deleted, or quiet). */
const FORGET_MS = 60_000;

export interface KeyedQueueBound {
  /** Whether the endpoint's keyed backlog was at the bound when last read (reads it again when a second old). */
  full(endpointId: string): boolean;
}

export function createKeyedQueueBound(deps: { jsm: JetStreamManager; shards: number; maxQueued: number; log: Logger }): KeyedQueueBound {
  const seen = new Map<string, { backlog: number; readAt: number; askedAt: number; reading: boolean }>();
  let swept = performance.now();

  function read(endpointId: string, entry: { backlog: number; readAt: number; reading: boolean }): void {
    entry.reading = true;
    entry.readAt = performance.now();
    deps.jsm.consumers.info(deliveryAddress(endpointId, deps.shards).stream, keyedConsumerName(endpointId))
      .then((ci) => { entry.backlog = ci.num_pending + ci.num_ack_pending; })
      // Not created yet (no delivery instance reconciled it): nothing queued there.
      .catch((e: unknown) => deps.log.debug('could not read an ordered endpoint\'s backlog', { endpoint: endpointId, reason: describe(e) }))
      .finally(() => { entry.reading = false; });
  }

  return {
    full(endpointId) {
      const now = performance.now();
      if (now - swept > FORGET_MS) {
        for (const [id, e] of seen) if (now - e.askedAt > FORGET_MS) seen.delete(id);
        swept = now;
      }
      let entry = seen.get(endpointId);
      if (!entry) seen.set(endpointId, (entry = { backlog: 0, readAt: -Infinity, askedAt: now, reading: false }));
      entry.askedAt = now;
      if (!entry.reading && now - entry.readAt >= REFRESH_MS) read(endpointId, entry);
      return entry.backlog >= deps.maxQueued;
    },
  };
}
