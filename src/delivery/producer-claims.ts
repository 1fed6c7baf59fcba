// Direct delivery's deduplication of a producer's retried publish (a Nats-Msg-Id stored twice in EVENTS:
// its window is 100 ms, since it is shared by every tenant). The router drops the second copy by its fan-out
// publish; here, each event with a producer id claims a mark (streams/producer-ids.ts) and is sent only
// when it holds it. The mark goes to the lowest EVENTS sequence that claims it while it stands: an earlier
// event takes it over from a later one, so the first of a producer's publishes is sent to every endpoint
// whatever order the processes read them in, and a later one is dropped only for an endpoint that will get
// the first. A claim that fails (NATS busy or away) sends the event: a duplicate at worst, never a loss.
import { headers } from '@nats-io/nats-core';
import { PRODUCER_ID_WINDOW_MS, PRODUCER_IDS_STREAM, producerIdSubject } from '../../streams/producer-ids.ts';
import { PublishRejectedError, type AckedPublisher } from '../nats/acked-publisher.ts';
import type { NextBySubject } from '../nats/next-by-subject.ts';
import type { Logger } from '../log.ts';
import { createSampledWarnings } from '../sampled-log.ts';
import { describe } from '../errors.ts';

export interface ProducerClaims {
  /**
   * The EVENTS sequence of the event that holds the producer id `scopedId` (src/domain/producer-id.ts):
   * `seq` when this event is the first seen with it, a lower one when it is a retried publish of that.
   * A number when this process knows already (every endpoint after the first).
   */
  holder(scopedId: string, seq: number): number | Promise<number>;
}

/** nats-server's answer to a publish whose expected last subject sequence is not the subject's. */
const WRONG_LAST_SEQUENCE = 10071;
const EVENT_SEQ_HEADER = 'hookstream-event-seq';
/**
 * Tries of a claim that other processes keep changing under it before it is sent unheld. Each failed try
 * means another claim was written since this one's read, and a mark is written at most once per event
 * that claims it (first, or taking it over from a later one): ten covers ten publishes of one id read at
 * once. Too few left the mark with a later event in tests (six processes at once, three tries).
 */
const TRIES = 10;
/** Marks kept known in this process: an event's endpoints read it within moments of each other. */
const KEPT = 65_536;
const EMPTY = new Uint8Array(0);

export function createProducerClaims(deps: { publisher: AckedPublisher; reads: NextBySubject; log: Logger; now?: () => number }): ProducerClaims {
  const now = deps.now ?? (() => performance.now());
  const warnings = createSampledWarnings(deps.log, { intervalMs: 60_000 });
  const known = new Map<string, { holder: number | Promise<number>; until: number }>();

  /** The mark's holder after this event's claim, from the server. */
  async function claim(scopedId: string, seq: number): Promise<number> {
    const subject = producerIdSubject(scopedId);
    let expected = 0;
    for (let i = 0; i < TRIES; i++) {
      const h = headers();
      h.set('Nats-Expected-Last-Subject-Sequence', String(expected));
      h.set(EVENT_SEQ_HEADER, String(seq));
      try {
        await deps.publisher.publish(subject, EMPTY, h);
        return seq;
      } catch (e) {
        if (!(e instanceof PublishRejectedError && e.code === WRONG_LAST_SEQUENCE)) throw e;
      }
      const mark = await deps.reads.last(PRODUCER_IDS_STREAM, subject);
      // Gone since (its time passed): claimed again as new.
      if (mark === null) expected = 0;
      else if (mark.eventSeq === undefined) throw new Error(`a mark on ${subject} names no event`);
      else if (mark.eventSeq <= seq) return mark.eventSeq;
      else expected = mark.seq;
    }
    return seq;
  }

  function holder(scopedId: string, seq: number): number | Promise<number> {
    const k = known.get(scopedId);
    if (k && now() < k.until) {
      if (typeof k.holder !== 'number') return k.holder.then((h) => (h <= seq ? h : holder(scopedId, seq)));
      if (k.holder <= seq) return k.holder;
    }
    const entry: { holder: number | Promise<number>; until: number } = { holder: 0, until: now() + PRODUCER_ID_WINDOW_MS };
    entry.holder = claim(scopedId, seq).then(
      (h) => {
        if (known.get(scopedId) === entry) entry.holder = h;
        return h;
      },
      (e: unknown) => {
        if (known.get(scopedId) === entry) known.delete(scopedId);
        warnings.warn('claim', 'could not check an event\'s producer id; sent without the check', { seq, reason: describe(e) });
        return seq;
      },
    );
    known.delete(scopedId);
    known.set(scopedId, entry);
    if (known.size > KEPT) known.delete(known.keys().next().value!);
    return entry.holder;
  }

  return { holder };
}
