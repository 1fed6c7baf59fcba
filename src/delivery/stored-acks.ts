// The delivery role's half of ROUTED (streams/routed.ts): a delivery answered 2xx is written down as
// stored for its event just before its ack, so that an event routed again skips it even though the ack
// removed it from its work queue. Without it, the router's own record (written once a fan-out is stored
// and its directory sync covered) missed deliveries already acked when an instance was killed, and a NATS
// restart then forgot their Nats-Msg-Ids (a restarted nats-server rebuilds the window only from messages
// still stored): issue 17 measured 4-9 % duplicates for a SIGKILL mid-burst followed by a NATS restart.
// The record and the acks leave on the same connection, record first, without waiting for JetStream's
// answer: once both are on the wire, killing this process loses neither. Batched every few milliseconds:
// a few small publishes a second per instance, whatever the delivery rate.
import { routedSubject, type RoutedMarker } from '../../streams/routed.ts';
import { DeliveryHeader } from '../../streams/deliveries.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { AckedPublisher } from '../nats/acked-publisher.ts';
import type { PulledMsg } from '../nats/pulled-msg.ts';

export interface StoredAcks {
  /**
   * Ack `m`, a delivery to `endpoint` answered 2xx, within a few milliseconds, after the record that it
   * was stored. False (nothing done) for a message without the router's event sequence (a dead letter
   * replayed from before issue 17): ack it as it is.
   */
  ack(m: PulledMsg, endpoint: string): boolean;
  /** Write and ack what is waiting (the delivery role is stopping). */
  flush(): void;
}

/** How long acks gather with their records. */
const BATCH_MS = 5;
/** Entries in one record at most (a record stays far below the 1 MB message limit). */
const MAX_ENTRIES = 2000;

export function createStoredAcks(deps: { publisher: AckedPublisher; log: Logger }): StoredAcks {
  // subject → event sequence → endpoint keys (`<id>@<version>`, the router's key); and the acks to send.
  let records = new Map<string, Map<number, string[]>>();
  let acks: PulledMsg[] = [];
  let timer: NodeJS.Timeout | undefined;
  let lastWarned = -Infinity;

  const warn = (e: unknown): void => {
    // The acks went out all the same: only an event routed again could double these deliveries.
    if (performance.now() - lastWarned < 60_000) return;
    lastWarned = performance.now();
    deps.log.warn('could not write down acknowledged deliveries', { reason: describe(e) });
  };

  function flush(): void {
    clearTimeout(timer);
    timer = undefined;
    for (const [subject, seqs] of records) {
      const entries = [...seqs];
      for (let i = 0; i < entries.length; i += MAX_ENTRIES) {
        const marker: RoutedMarker = { v: 1, partial: Object.fromEntries(entries.slice(i, i + MAX_ENTRIES)) };
        // Written to the connection now (publish() sends synchronously); JetStream's answer is not awaited.
        deps.publisher.publish(subject, JSON.stringify(marker)).catch(warn);
      }
    }
    const batch = acks;
    records = new Map();
    acks = [];
    for (const m of batch) m.ack();
  }

  return {
    ack(m, endpoint) {
      const seq = Number(m.headers?.get(DeliveryHeader.EventSeq));
      if (!Number.isSafeInteger(seq) || seq <= 0) return false;
      const key = `${endpoint}@${m.headers?.get(DeliveryHeader.EndpointVersion) ?? ''}`;
      const subject = routedSubject(seq);
      let seqs = records.get(subject);
      if (!seqs) records.set(subject, (seqs = new Map()));
      const keys = seqs.get(seq);
      if (keys) keys.push(key);
      else seqs.set(seq, [key]);
      acks.push(m);
      timer ??= setTimeout(flush, BATCH_MS);
      return true;
    },
    flush,
  };
}
