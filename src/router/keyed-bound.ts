// The queue bound of an ordered endpoint (issue 21). A delivery stream's max_msgs_per_subject bounds one
// subject, which for an ordered endpoint is one key: the endpoint as a whole is bounded here instead, by
// its keyed consumer's backlog (pending + ack-pending) as last read plus what this router routed to it
// since, never on the routing path. The backlog is read again at most once a second while that sum is at
// half the bound or more, and otherwise every half minute (it also counts other routers' deliveries): an
// ordered endpoint far from its bound costs no request a second. So the bound is approximate by up to a
// second or so of that endpoint's traffic (other routers': up to the half minute); past it the router
// refuses a keyed delivery as JetStream refuses a full plain queue. A reading's answer counts what was
// stored before it: what this router had stored by then is taken as in it, what was still on its way to the
// stream is added. (Counting routed deliveries from the reading's start counted those stored while it was
// under way twice, and refused deliveries with room left.) Those stored while a reading was under way may
// be missing from its answer (made before they were stored): a second reading follows at once, so the
// bound lets in at most those for a moment, and never refuses a delivery with room left.
import type { JetStreamManager } from '@nats-io/jetstream';
import { deliveryAddress, keyedConsumerName } from '../../streams/deliveries.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';

const REFRESH_MS = 1000;
const FAR_REFRESH_MS = 30_000;
/** Entries not asked about for this long are dropped (endpoints switched back, deleted, or quiet). */
const FORGET_MS = 60_000;

export interface KeyedQueueBound {
  /** Whether the endpoint's keyed backlog is at the bound; a false answer counts as a delivery on its way to it. */
  full(endpointId: string): boolean;
  /** The publish of a delivery counted by full() was answered: `stored`, or not (it failed). */
  answered(endpointId: string, stored: boolean): void;
}

interface Seen {
  /** The backlog as last read. */
  backlog: number;
  /** Deliveries this router stored since the last reading's answer. */
  since: number;
  /** Deliveries counted by full() whose publish is not answered yet. */
  onTheWay: number;
  /** Deliveries this router stored while the reading under way was asked. */
  storedDuring: number;
  readAt: number;
  askedAt: number;
  reading: boolean;
}

export function createKeyedQueueBound(deps: { jsm: JetStreamManager; shards: number; maxQueued: number; log: Logger }): KeyedQueueBound {
  const seen = new Map<string, Seen>();
  let swept = performance.now();

  function read(endpointId: string, entry: Seen, again = true): void {
    entry.reading = true;
    entry.readAt = performance.now();
    entry.storedDuring = 0;
    deps.jsm.consumers.info(deliveryAddress(endpointId, deps.shards).stream, keyedConsumerName(endpointId))
      .then((ci) => { entry.backlog = ci.num_pending + ci.num_ack_pending; entry.since = 0; })
      // Not created yet (no delivery instance reconciled it): nothing queued there.
      .catch((e: unknown) => deps.log.debug('could not read an ordered endpoint\'s backlog', { endpoint: endpointId, reason: describe(e) }))
      .finally(() => {
        entry.reading = false;
        // Stored while it was asked: maybe not in its answer. The next reading, asked now, has them.
        if (again && entry.storedDuring > 0) read(endpointId, entry, false);
      });
  }

  return {
    full(endpointId) {
      const now = performance.now();
      if (now - swept > FORGET_MS) {
        for (const [id, e] of seen) if (now - e.askedAt > FORGET_MS) seen.delete(id);
        swept = now;
      }
      let entry = seen.get(endpointId);
      if (!entry) seen.set(endpointId, (entry = { backlog: 0, since: 0, onTheWay: 0, storedDuring: 0, readAt: -Infinity, askedAt: now, reading: false }));
      entry.askedAt = now;
      const estimate = entry.backlog + entry.since + entry.onTheWay;
      const full = estimate >= deps.maxQueued;
      if (!full) entry.onTheWay++;
      const every = estimate * 2 >= deps.maxQueued ? REFRESH_MS : FAR_REFRESH_MS;
      if (!entry.reading && now - entry.readAt >= every) read(endpointId, entry);
      return full;
    },
    answered(endpointId, stored) {
      const entry = seen.get(endpointId);
      if (!entry) return;
      entry.onTheWay = Math.max(0, entry.onTheWay - 1);
      if (!stored) return;
      entry.since++;
      if (entry.reading) entry.storedDuring++;
    },
  };
}
