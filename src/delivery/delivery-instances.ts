// How many delivery instances are running, as this one sees them: what a tenant's `events_per_second` is
// shared by on the direct path (src/delivery/tenant-pace.ts), since every instance pulls every endpoint's
// consumer. Each instance says it is alive on core NATS every HEARTBEAT_MS, on a subject inside the
// service's account (nats.conf; a producer's account cannot reach it), and counts the others heard from in
// the last three heartbeats. Nothing is stored: an instance that stops is forgotten within them, and one cut
// off from NATS counts itself alone (a tenant's rate is then at most that of the instances it cannot hear,
// never lower than it should be).
import { randomBytes } from 'node:crypto';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';

/** `hookstream.delivery_instances.<id>`: each delivery instance's heartbeat. */
export const DELIVERY_INSTANCES_PREFIX = 'hookstream.delivery_instances.';
export const HEARTBEAT_MS = 2000;
/** Instances counted at most (a bound on memory, far above any deployment). */
const MAX_COUNTED = 1024;
const ID = /^[0-9a-f]{16}$/;

export interface DeliveryInstances {
  /** Instances alive, this one included (at least 1). */
  count(): number;
  stop(): void;
}

export function startDeliveryInstances(deps: {
  nc: NatsConnection; log: Logger; heartbeatMs?: number; now?: () => number;
}): DeliveryInstances {
  const now = deps.now ?? (() => performance.now());
  const heartbeatMs = deps.heartbeatMs ?? HEARTBEAT_MS;
  // Three heartbeats missed: gone.
  const expiresMs = 3 * heartbeatMs + 500;
  const self = randomBytes(8).toString('hex');
  const seen = new Map<string, number>();
  const sub: Subscription = deps.nc.subscribe(`${DELIVERY_INSTANCES_PREFIX}*`, {
    callback: (err, m) => {
      if (err) return deps.log.warn('cannot hear the other delivery instances; pacing as if alone', { reason: describe(err) });
      const id = m.subject.slice(DELIVERY_INSTANCES_PREFIX.length);
      if (id === self || !ID.test(id) || (!seen.has(id) && seen.size >= MAX_COUNTED)) return;
      seen.set(id, now());
    },
  });
  const beat = () => {
    try {
      deps.nc.publish(`${DELIVERY_INSTANCES_PREFIX}${self}`);
    } catch {
      // Closed or reconnecting: the next beat tries again.
    }
  };
  beat();
  const timer = setInterval(beat, heartbeatMs);
  timer.unref();
  return {
    count() {
      const alive = now() - expiresMs;
      for (const [id, at] of seen) if (at < alive) seen.delete(id);
      return seen.size + 1;
    },
    stop() {
      clearInterval(timer);
      sub.unsubscribe();
    },
  };
}
