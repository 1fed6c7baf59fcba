// The queue bound of an ordered endpoint (issue 21). A delivery stream's max_msgs_per_subject bounds one
// subject, which for an ordered endpoint is one key: the endpoint as a whole is bounded here instead, by
// its keyed consumer's backlog (pending + ack-pending) as last read plus what this router routed to it
// since, never on the routing path. The backlog is read again at most once a second while that sum is at
// half the bound or more, and otherwise every half minute (it also counts other routers' deliveries): an
// ordered endpoint far from its bound costs no request a second. So the bound is approximate by up to a
// second or so of that endpoint's traffic (other routers': up to the half minute); past it the router
// refuses a keyed delivery as JetStream refuses a full plain queue.
import type { JetStreamManager } from '@nats-io/jetstream';
import { deliveryAddress, keyedConsumerName } from '../../streams/deliveries.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';

const REFRESH_MS = 1000;
const FAR_REFRESH_MS = 30_000;
/** Entries not asked about for this long are dropped (endpoints switched back, deleted, or quiet). */
const FORGET_MS = 60_000;

export interface KeyedQueueBound {
  /** Whether the endpoint's keyed backlog is at the bound; a false answer counts as a delivery routed to it. */
  full(endpointId: string): boolean;
}

interface Seen {
  /** The backlog as last read. */
  backlog: number;
  /** Deliveries routed to it since the last read started. */
  since: number;
  readAt: number;
  askedAt: number;
  reading: boolean;
}

export function createKeyedQueueBound(deps: { jsm: JetStreamManager; shards: number; maxQueued: number; log: Logger }): KeyedQueueBound {
  const seen = new Map<string, Seen>();
  let swept = performance.now();

  function read(endpointId: string, entry: Seen): void {
    entry.reading = true;
    entry.readAt = performance.now();
    // What is routed from now on is not in the answer; what was routed before is (or is delivered already).
    const counted = entry.since;
    deps.jsm.consumers.info(deliveryAddress(endpointId, deps.shards).stream, keyedConsumerName(endpointId))
      .then((ci) => { entry.backlog = ci.num_pending + ci.num_ack_pending; entry.since -= counted; })
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
      if (!entry) seen.set(endpointId, (entry = { backlog: 0, since: 0, readAt: -Infinity, askedAt: now, reading: false }));
      entry.askedAt = now;
      const estimate = entry.backlog + entry.since;
      const full = estimate >= deps.maxQueued;
      // Counted before a read starts: a reading that comes back without it errs toward letting one more in.
      if (!full) entry.since++;
      const every = estimate * 2 >= deps.maxQueued ? REFRESH_MS : FAR_REFRESH_MS;
      if (!entry.reading && now - entry.readAt >= every) read(endpointId, entry);
      return full;
    },
  };
}
