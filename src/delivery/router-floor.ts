// The ordering gates' barrier (issue 21): how far the router has handled EVENTS. Once its floor is at
// S-1, every delivery of an event before S is stored (the router acks an event only after its whole
// fan-out is stored, and terminates one it rejects), so a key's order can be read from the stream.
// One reader per delivery process, asking the router's consumer only while some gate waits on it.
import type { JetStreamManager } from '@nats-io/jetstream';
import { EVENTS_STREAM, ROUTER_CONSUMER, routerFloor } from '../../streams/events.ts';
import { lateMarkSubject } from '../../streams/deliveries.ts';
import type { NextBySubject } from '../nats/next-by-subject.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';

/** Between two reads of the router's consumer while something waits: a barrier costs at most about this. */
export const FLOOR_POLL_MS = 25;

/** A delivery stream's last late mark (src/router/late-marks.ts), read right after a reading of the floor. */
export interface LateMark {
  /** The floor read just before: every mark of a delivery of an event up to it was stored by then. */
  floor: number;
  /** The last marker's stream sequence; 0 when the stream has none (then nothing is known: read to the end). */
  seq: number;
}

export interface RouterFloor {
  /** The floor as last read (0 before the first read): every read of it completed before now. */
  known(): number;
  /** The last mark of `stream`, read with the floor from now on (the gate of a stream asks once). */
  lateMark(stream: string): LateMark | undefined;
  /** `go` runs once the floor is read at `min` or more (at once when it is known to be). */
  when(min: number, go: () => void): void;
  close(): void;
}

export function createRouterFloor(deps: { jsm: JetStreamManager; log: Logger; pollMs?: number; heads?: NextBySubject }): RouterFloor {
  const pollMs = deps.pollMs ?? FLOOR_POLL_MS;
  const { heads } = deps;
  let floor = 0;
  let waiters: { min: number; go: () => void }[] = [];
  let timer: NodeJS.Timeout | undefined;
  let lastRead = -Infinity;
  let reading = false;
  let failing = false;
  let closed = false;
  /** The streams whose marks are read with the floor, and what was read last (absent: not yet, or failed). */
  const marks = new Map<string, LateMark | undefined>();

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
      const read = routerFloor(await deps.jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER));
      floor = Math.max(floor, read);
      failing = false;
      // After the floor: every marker of an event up to it is stored before these reads.
      if (heads) await Promise.all([...marks.keys()].map(async (stream) => {
        const last = await heads.last(stream, lateMarkSubject(stream)).catch(() => undefined);
        marks.set(stream, last === undefined ? undefined : { floor: read, seq: last?.seq ?? 0 });
      }));
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
    lateMark(stream) {
      if (!heads) return undefined;
      if (!marks.has(stream)) marks.set(stream, undefined);
      return marks.get(stream);
    },
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
