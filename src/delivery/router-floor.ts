// The ordering gates' barrier (issue 21): how far the router has handled EVENTS. Once its floor is at
// S-1, every delivery of an event before S is stored (the router acks an event only after its whole
// fan-out is stored, and terminates one it rejects), so a key's order can be read from the stream.
// One reader per delivery process, asking the router's consumer only while some gate waits on it.
import type { JetStreamManager } from '@nats-io/jetstream';
import { EVENTS_STREAM, ROUTER_CONSUMER, routerFloor } from '../../streams/events.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';

/** Between two reads of the router's consumer while something waits: a barrier costs at most about this. */
export const FLOOR_POLL_MS = 25;

export interface RouterFloor {
  /** The floor as last read (0 before the first read): every read of it completed before now. */
  known(): number;
  /** `go` runs once the floor is read at `min` or more (at once when it is known to be). */
  when(min: number, go: () => void): void;
  close(): void;
}

export function createRouterFloor(deps: { jsm: JetStreamManager; log: Logger; pollMs?: number }): RouterFloor {
  const pollMs = deps.pollMs ?? FLOOR_POLL_MS;
  let floor = 0;
  let waiters: { min: number; go: () => void }[] = [];
  let timer: NodeJS.Timeout | undefined;
  let lastRead = -Infinity;
  let reading = false;
  let failing = false;
  let closed = false;

  const release = () => {
    const ready = waiters.filter((w) => w.min <= floor);
    if (ready.length === 0) return;
    waiters = waiters.filter((w) => w.min > floor);
    for (const w of ready) w.go();
  };

  const schedule = () => {
    if (closed || timer || reading || waiters.length === 0) return;
    // At most one read per poll interval, however often gates start waiting.
    timer = setTimeout(() => { timer = undefined; void read(); }, Math.max(0, lastRead + pollMs - performance.now()));
  };

  async function read(): Promise<void> {
    reading = true;
    lastRead = performance.now();
    try {
      floor = Math.max(floor, routerFloor(await deps.jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER)));
      failing = false;
    } catch (e) {
      // Keyed deliveries wait meanwhile (order before progress); said once per outage, not per read.
      if (!failing) deps.log.warn('could not read the router\'s progress; ordered deliveries wait', { reason: describe(e) });
      failing = true;
    } finally {
      reading = false;
    }
    if (closed) return;
    release();
    schedule();
  }

  return {
    known: () => floor,
    when(min, go) {
      if (min <= floor) return go();
      waiters.push({ min, go });
      schedule();
    },
    close() {
      closed = true;
      clearTimeout(timer);
      waiters = [];
    },
  };
}
