// Erasure's reach into the partition streams (HOOKSTREAM_EVENT_PARTITIONS, streams/events.ts): nats-server
// copies each event of a partitioned EVENTS into its tenant's EVENTS_<p>, so what erases an event erases
// that copy too. A copy names its EVENTS sequence, and copies are stored in EVENTS order, so the copy of
// an event is found by a binary search over the tenant's copies (about 20 reads in a stream of a
// million), never a scan.
import type { JetStreamManager, StoredMsg } from '@nats-io/jetstream';
import { EVENTS_STREAM, partitionStream, sourcedSeq } from '../../streams/events.ts';
import { producerSubject } from '../domain/event-data.ts';
import { tenantPartition } from '../domain/partition.ts';

export interface PartitionCopies {
  /** The tenant's partition stream. */
  stream: string;
  /**
   * Wait until the stream holds the copy of the tenant's newest partitioned event in EVENTS, so a copy
   * being made now is not missed; false when it did not within `timeoutMs`.
   */
  caughtUp(timeoutMs: number): Promise<boolean>;
  /** The sequences, in the partition stream, of the copies of these EVENTS sequences (those that have one). */
  find(eventsSeqs: Iterable<number>): Promise<number[]>;
}

const POLL_MS = 100;

/** The tenant's partition copies; undefined when EVENTS is not partitioned. */
export function partitionCopies(jsm: JetStreamManager, partitions: number, tenant: string): PartitionCopies | undefined {
  if (partitions === 0) return undefined;
  const stream = partitionStream(tenantPartition(tenant, partitions));
  const tenantEvents = `events.${tenant}.>`;
  const get = (name: string, q: object): Promise<StoredMsg | null> => jsm.streams.getMessage(name, q as never);
  /** The tenant's first copy at `seq` or after it. */
  const nextCopy = (seq: number) => get(stream, { seq, next_by_subj: tenantEvents });
  const copied = (m: StoredMsg) => sourcedSeq(m.header) ?? 0;

  return {
    stream,
    async caughtUp(timeoutMs) {
      const until = performance.now() + timeoutMs;
      for (;;) {
        // Read again each round: an event erased before it was copied is never copied.
        const newest = await get(EVENTS_STREAM, { last_by_subj: tenantEvents });
        if (!newest || producerSubject(newest.subject) === newest.subject) return true;
        const copy = await get(stream, { last_by_subj: tenantEvents });
        if (copy && copied(copy) >= newest.seq) return true;
        if (performance.now() > until) return false;
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
    },
    async find(eventsSeqs) {
      const { state } = await jsm.streams.info(stream);
      const found: number[] = [];
      // Positions before `from` hold only copies of earlier events than the one looked for.
      let from = state.first_seq;
      for (const e of [...new Set(eventsSeqs)].sort((a, b) => a - b)) {
        // The first position whose next copy was made from e or a later event.
        let lo = from;
        let hi = state.last_seq + 1;
        while (lo < hi) {
          const mid = Math.floor((lo + hi) / 2);
          const m = await nextCopy(mid);
          if (!m || copied(m) >= e) hi = mid;
          else lo = m.seq + 1;
        }
        from = lo;
        const m = lo <= state.last_seq ? await nextCopy(lo) : null;
        if (m && copied(m) === e) found.push(m.seq);
      }
      return found;
    },
  };
}
