// The router's record of what it stored (streams/routed.ts). Events whose whole fan-out is stored are
// written down together, one marker per bucket every flush, before they are acked: a few small publishes
// a second whatever the event rate, and nothing on a delivery's path. An event delivered to the router
// again (deliveryCount > 1) is looked up: done → acked without routing; partly stored → only the rest.
import type { JetStreamManager, JsMsg } from '@nats-io/jetstream';
import { ROUTED_STREAM, routedSubject, type RoutedMarker } from '../../streams/routed.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { AckedPublisher } from '../nats/acked-publisher.ts';

/** What is known to be stored of an event's fan-out. */
export type Routed = { done: true } | { done: false; stored: Set<string> };

export interface RoutedLog {
  /** The event's whole fan-out is stored: written down with the next flush, then acked. */
  done(m: JsMsg): void;
  /** Part of the fan-out is stored and the event goes back for a retry: written down now (best effort). */
  partial(seq: number, stored: Iterable<string>): Promise<void>;
  /** What an earlier delivery of this event stored, if anything. */
  lookup(seq: number): Promise<Routed | undefined>;
  /** Write down and ack what is waiting. */
  flush(): Promise<void>;
}

/** One marker subject's contents, as read at `at` (monotonic) and added to since. */
interface Bucket {
  at: number;
  done: [number, number][];
  partial: Map<number, Set<string>>;
}

/** How long a bucket read from ROUTED is trusted before it is read again. */
const BUCKET_CACHE_MS = 5_000;
/** The longest single wait between tries to write routed events down (250 ms doubling: about 8 s in all). */
const MARKER_PATIENCE_MS = 4_000;

export function createRoutedLog(deps: { jsm: JetStreamManager; publisher: AckedPublisher; intervalMs: number; log: Logger }): RoutedLog {
  const { jsm, publisher, log } = deps;
  let waiting: JsMsg[] = [];
  let timer: NodeJS.Timeout | undefined;
  let flushing: Promise<void> = Promise.resolve();
  const buckets = new Map<string, Bucket>();
  // One read per bucket at a time: the events of a killed instance come back together, hundreds per
  // bucket, and each read is one request per marker (issue 17: a read each stalled a restarted instance's
  // router, and with it its deliveries, for over two minutes).
  const reads = new Map<string, Promise<Bucket>>();

  /** Consecutive sequences as ranges. */
  function ranges(seqs: number[]): [number, number][] {
    const sorted = [...seqs].sort((a, b) => a - b);
    const out: [number, number][] = [];
    for (const s of sorted) {
      const last = out[out.length - 1];
      if (last && s <= last[1] + 1) last[1] = Math.max(last[1], s);
      else out.push([s, s]);
    }
    return out;
  }

  async function write(subject: string, marker: RoutedMarker): Promise<void> {
    await publisher.publish(subject, JSON.stringify(marker));
  }

  async function writeAndAck(batch: JsMsg[]): Promise<void> {
    const bySubject = new Map<string, number[]>();
    for (const m of batch) {
      const subject = routedSubject(m.seq);
      const list = bySubject.get(subject);
      if (list) list.push(m.seq);
      else bySubject.set(subject, [m.seq]);
    }
    const pending = [...bySubject].map(([subject, seqs]) => ({ subject, done: ranges(seqs) }));
    // NATS going away for a moment (a restart) must not lose the record: its acks would be lost too, and the
    // events would come back to be routed again. Tried for about 10 s, well within the events' ack wait.
    for (let wait = 250; pending.length > 0; wait *= 2) {
      const results = await Promise.allSettled(pending.map((p) => write(p.subject, { v: 1, done: p.done })));
      for (let i = results.length - 1; i >= 0; i--) {
        if (results[i]!.status !== 'fulfilled') continue;
        // A bucket read before this write (or being read) must still know these events when one comes back.
        const { subject, done } = pending[i]!;
        buckets.get(subject)?.done.push(...done);
        void reads.get(subject)?.then((b) => b.done.push(...done), () => {});
        pending.splice(i, 1);
      }
      if (pending.length === 0) break;
      if (wait > MARKER_PATIENCE_MS) {
        // Routed all the same: without the record, a later redelivery only fans out again (duplicates).
        const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
        log.warn('could not write down routed events; acking them anyway', { events: batch.length, reason: describe(failed?.reason) });
        break;
      }
      await new Promise((r) => setTimeout(r, wait));
    }
    for (const m of batch) m.ack();
  }

  const flush = (): Promise<void> => {
    clearTimeout(timer);
    timer = undefined;
    const batch = waiting;
    waiting = [];
    if (batch.length === 0) return flushing;
    flushing = flushing.then(() => writeAndAck(batch));
    return flushing;
  };

  function readBucket(subject: string): Promise<Bucket> {
    const cached = buckets.get(subject);
    if (cached && performance.now() - cached.at < BUCKET_CACHE_MS) return Promise.resolve(cached);
    const reading = reads.get(subject);
    if (reading) return reading;
    const read: Promise<Bucket> = load(subject).finally(() => { if (reads.get(subject) === read) reads.delete(subject); });
    reads.set(subject, read);
    return read;
  }

  async function load(subject: string): Promise<Bucket> {
    const bucket: Bucket = { at: performance.now(), done: [], partial: new Map() };
    for (let seq = 0; ;) {
      const m = await jsm.streams.getMessage(ROUTED_STREAM, { next_by_subj: subject, seq } as never).catch(() => null);
      if (!m) break;
      seq = m.seq + 1;
      let marker: RoutedMarker;
      try { marker = m.json<RoutedMarker>(); } catch { continue; }
      if (Array.isArray(marker.done)) bucket.done.push(...marker.done.filter((r) => Array.isArray(r) && r.length === 2));
      for (const [s, stored] of Object.entries(marker.partial ?? {})) {
        const set = bucket.partial.get(Number(s)) ?? new Set<string>();
        for (const e of Array.isArray(stored) ? stored : []) set.add(String(e));
        bucket.partial.set(Number(s), set);
      }
    }
    buckets.set(subject, bucket);
    return bucket;
  }

  return {
    done(m) {
      if (waiting.push(m) === 1) timer = setTimeout(() => void flush(), deps.intervalMs);
    },
    async partial(seq, stored) {
      const list = [...stored];
      if (list.length === 0) return;
      buckets.delete(routedSubject(seq));
      reads.delete(routedSubject(seq));
      await write(routedSubject(seq), { v: 1, partial: { [seq]: list } }).catch((e: unknown) =>
        log.warn('could not write down a partly stored fan-out', { seq, reason: describe(e) }));
    },
    async lookup(seq) {
      const bucket = await readBucket(routedSubject(seq));
      if (bucket.done.some(([from, to]) => seq >= from && seq <= to)) return { done: true };
      const stored = bucket.partial.get(seq);
      return stored ? { done: false, stored } : undefined;
    },
    flush,
  };
}
