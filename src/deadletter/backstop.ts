// The backstop of dead-lettering (issue 17). nats-server sends the max-deliveries advisory once, as a plain
// publish, and drops the message from its consumer's pending set at the same moment: if the advisory is
// not stored then (the advisory stream unavailable, a leader election), the message would sit in its work
// queue for ever. The advisory stays the trigger; every interval, this looks for such messages and hands
// them to the same idempotent path.
//
// Cheap when nothing is wrong: per delivery stream, one stream info with per-subject counts and one
// consumer listing. A consumer whose subject holds more messages than it has pending (unsent) and
// ack-pending (in flight or waiting for a retry) has dropped some: only there, and only when it was so on
// the previous scan too (an advisory being handled right now is not the backstop's), are the oldest
// messages read, and one is buried when its last attempt record says it was the final attempt, failed
// longer than an interval ago.
//
// A shortfall that no dead delivery explains for DIVERGED_AFTER_SCANS scans is not death: a replicated
// stream's copies diverged (nats-server below 2.11 after "Resetting stream cluster state"), the consumer's
// leader counting nothing pending while its stream holds messages that will never be handed out. That is
// shown (hookstream_delivery_consumer_divergence, an error line) and the consumer's leader is asked to
// step down, so that a server whose copy of the stream is whole may lead it.
import type { JetStreamManager } from '@nats-io/jetstream';
import { ATTEMPTS_STREAM, attemptSubject, type AttemptRecord } from '../../streams/attempts.ts';
import { consumerEndpoint, DeliveryHeader, deliveryStream, keyedPrefix, keyedSubjects } from '../../streams/deliveries.ts';
import { listConsumers } from '../../streams/ensure.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { everyInterval } from './every-interval.ts';

/** A dropped delivery to dead-letter: from an advisory, or found by the backstop. */
export interface Death {
  stream: string;
  seq: number;
  /** The endpoint's consumer (its id, or `<id>-key` for its keyed deliveries). */
  consumer: string;
  /** Deliveries made, when no attempt record says how many attempts. */
  deliveries: number;
  /** When it died, when no attempt record says (ISO 8601). */
  at: string;
  by: 'advisory' | 'backstop';
}

/** Messages stored under every subject that starts with `prefix`. */
function storedUnder(counts: Record<string, number>, prefix: string): number {
  let n = 0;
  for (const [subject, count] of Object.entries(counts)) if (subject.startsWith(prefix)) n += count;
  return n;
}

/** Messages read at most per endpoint and scan while looking for the dropped ones. */
const MAX_WALK = 1000;

/** Consecutive scans a consumer is short of deliveries no death explains before it counts as diverged. */
export const DIVERGED_AFTER_SCANS = 3;

export function startBackstop(deps: {
  jsm: JetStreamManager;
  shards: number;
  /** retry schedule length + 1: an attempt record with this attempt number was the last one. */
  maxDeliver: number;
  intervalMs: number;
  bury: (death: Death) => Promise<boolean>;
  log: Logger;
  metrics: ServiceMetrics;
  /** Asks a consumer's leader to step down; resolves with what the server said. */
  stepdown?: (stream: string, consumer: string) => Promise<string>;
}): { stop(): Promise<void> } {
  const { jsm, log } = deps;
  /** `<stream> <consumer>` short of messages: for how many scans in a row. */
  let shortFor = new Map<string, number>();
  let stopped = false;

  async function lastAttempt(endpoint: string, webhookId: string): Promise<AttemptRecord | undefined> {
    const m = await jsm.streams.getMessage(ATTEMPTS_STREAM, { last_by_subj: attemptSubject(endpoint, webhookId) }).catch(() => null);
    return m ? m.json<AttemptRecord>() : undefined;
  }

  /** Walk `subject` from its oldest message up to `upTo`; bury up to `missing` whose final attempt failed long enough ago. */
  async function sweepSubject(stream: string, consumer: string, endpoint: string, subject: string, upTo: number, missing: number): Promise<number> {
    let found = 0;
    const before = Date.now() - deps.intervalMs;
    for (let seq = 0, walked = 0; found < missing && walked < MAX_WALK && !stopped; walked++) {
      const m = await jsm.streams.getMessage(stream, { next_by_subj: subject, seq } as never).catch(() => null);
      if (!m || m.seq > upTo) break;
      seq = m.seq + 1;
      const webhookId = m.header.get(DeliveryHeader.WebhookId);
      const last = webhookId ? await lastAttempt(endpoint, webhookId) : undefined;
      if (!last || last.attempt < deps.maxDeliver || Date.parse(last.at) > before) continue;
      if (await deps.bury({ stream, seq: m.seq, consumer, deliveries: last.attempt, at: last.at, by: 'backstop' })) {
        found++;
        deps.metrics.deadLettersBackstop.inc();
      }
    }
    return found;
  }

  async function scan(): Promise<void> {
    const next = new Map<string, number>();
    const diverged: { stream: string; consumer: string; count: number }[] = [];
    for (let shard = 0; shard < deps.shards && !stopped; shard++) {
      const stream = deliveryStream(shard);
      const info = await jsm.streams.info(stream, { subjects_filter: `deliveries.${shard}.>` });
      const counts = info.state.subjects ?? {};
      if (Object.keys(counts).length === 0) continue;
      for await (const ci of listConsumers(jsm, stream)) {
        // An ordered endpoint's keyed consumer (issue 21) reads every per-key subject of its endpoint.
        const { endpoint, keyed } = consumerEndpoint(ci.name);
        const subject = keyed ? keyedSubjects(endpoint, deps.shards) : `deliveries.${shard}.${ci.name}`;
        const stored = keyed ? storedUnder(counts, keyedPrefix(endpoint, deps.shards)) : counts[subject] ?? 0;
        const dropped = stored - ci.num_pending - ci.num_ack_pending;
        if (dropped <= 0) continue;
        const key = `${stream} ${ci.name}`;
        const scans = (shortFor.get(key) ?? 0) + 1;
        next.set(key, scans);
        if (scans < 2) continue;
        const found = await sweepSubject(stream, ci.name, endpoint, subject, ci.delivered.stream_seq, dropped);
        if (found >= dropped) { next.delete(key); continue; }
        const unexplained = dropped - found;
        if (scans < DIVERGED_AFTER_SCANS) {
          log.info('backstop: a consumer holds fewer deliveries than its queue, not all dead', { stream, endpoint: ci.name, dropped, buried: found });
          continue;
        }
        diverged.push({ stream, consumer: ci.name, count: unexplained });
        // Said and acted on once every DIVERGED_AFTER_SCANS scans while it lasts, not at every scan.
        if (scans % DIVERGED_AFTER_SCANS !== 0) continue;
        const stepdown = deps.stepdown ? await deps.stepdown(stream, ci.name) : 'not asked';
        log.error('a delivery stream holds deliveries its consumer has neither pending nor in flight: its replicas may have diverged; '
          + 'asked the consumer\'s leader to step down', {
          stream, consumer: ci.name, stored, pending: ci.num_pending, ack_pending: ci.num_ack_pending, unexplained, scans, stepdown,
        });
      }
    }
    shortFor = next;
    deps.metrics.deliveryDivergence.clear();
    for (const d of diverged) deps.metrics.deliveryDivergence.set(d.count, { stream: d.stream, consumer: d.consumer });
  }

  const scans = everyInterval(deps.intervalMs, scan, (e) => log.warn('dead-letter backstop scan failed; trying at the next interval', { reason: describe(e) }));

  return {
    async stop() {
      stopped = true;
      await scans.stop();
    },
  };
}
