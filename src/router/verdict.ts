// Every event the router is given ends with a verdict: routed (acked), rejected (stored in REJECTED with
// its reason, counted, logged, terminated), or, when the failure is not the event's fault, handed back for
// a later try. A rejection that cannot be stored is handed back too: an event is never terminated
// without its record.
import type { JsMsg } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { RejectedHeader, rejectedSubject } from '../../streams/rejected.ts';
import { ROUTER_MAX_DELIVER } from '../../streams/events.ts';
import { producerSubject, RejectionReason } from '../domain/event-data.ts';
import { isTenantId } from '../domain/ids.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { PublishRejectedError, type AckedPublisher } from '../nats/acked-publisher.ts';
import { routingRejected, tracing } from '../telemetry/tracing.ts';

/**
 * Routing is tried on deliveries 1 to 7; from the 8th the event is rejected as route_failed without
 * another try (an event that kills the router every time must not loop), and deliveries 9 and 10 are
 * spare for storing that rejection if NATS refuses it at first.
 */
export const LAST_ROUTING_DELIVERY = ROUTER_MAX_DELIVER - 3;

/**
 * Waits before an event whose routing failed for NATS's reasons comes back (`nak(delay)`: the router's
 * consumer has no backoff, so the wait is exact), by delivery: about an hour in all before the 8th
 * delivery rejects it. A whole-server outage does not count: nothing is redelivered while it lasts.
 */
const RETRY_DELAYS_MS = [1_000, 5_000, 15_000, 60_000, 300_000, 900_000, 1_800_000, 1_800_000, 1_800_000];
export const retryDelayMs = (deliveryCount: number): number =>
  RETRY_DELAYS_MS[Math.min(Math.max(deliveryCount, 1), RETRY_DELAYS_MS.length) - 1]!;

/** JetStream's "message size exceeds maximum allowed": the event's own fault, retrying cannot help. */
const MESSAGE_TOO_LARGE = 10054;

/**
 * Whether a fan-out publish failed because of the event (reject it) rather than NATS (retry it): only
 * a stream refusing the message for its size. Timeouts, no responders, a closed connection, a full or
 * missing stream are NATS's, and pass.
 */
export const isEventsFault = (e: unknown): boolean => e instanceof PublishRejectedError && e.code === MESSAGE_TOO_LARGE;

/** Longest detail stored and logged; details come from the checks or an exception's message, never the body. */
const MAX_DETAIL = 300;

export interface Verdicts {
  /** Store the event in REJECTED, then count, log and terminate it; if storing fails, hand it back. */
  reject(m: JsMsg, reason: RejectionReason, detail: string): Promise<void>;
  /** Hand the event back for a later try: the failure was not its fault. */
  retry(m: JsMsg, why: string): void;
  /** The event at `seq` is here again (or routed): no longer waiting. */
  arrived(seq: number): void;
  /** Events this process handed back that are still waiting for their next try, and the longest wait so far. */
  waiting(): { events: number; longestMs: number };
}

/** A waiting event not back this long after its due time went to another instance: forgotten here. */
const FORGET_AFTER_MS = 60_000;

export function createVerdicts(deps: { publisher: AckedPublisher; maxEventBytes: number; log: Logger; metrics: ServiceMetrics }): Verdicts {
  const { publisher, log, metrics } = deps;

  // EVENTS sequence → when it was handed back and when it is due (monotonic), for readiness (issue 17).
  const handedBack = new Map<number, { since: number; due: number }>();

  const retry = (m: JsMsg, why: string): void => {
    const delay = retryDelayMs(m.info.deliveryCount);
    const now = performance.now();
    handedBack.set(m.seq, { since: now, due: now + delay });
    metrics.eventsRetried.inc();
    log.warn('event not routed, will be retried', { subject: m.subject, seq: m.seq, deliveries: m.info.deliveryCount, retry_in_ms: delay, reason: why });
    m.nak(delay);
  };

  async function reject(m: JsMsg, reason: RejectionReason, rawDetail: string): Promise<void> {
    const detail = rawDetail.length > MAX_DETAIL ? `${rawDetail.slice(0, MAX_DETAIL - 1)}…` : rawDetail;
    const tenant = m.subject.split('.')[1];
    const h = natsHeaders();
    h.set(RejectedHeader.Reason, reason);
    h.set(RejectedHeader.Detail, detail);
    h.set(RejectedHeader.Subject, producerSubject(m.subject));
    if (tenant !== undefined && isTenantId(tenant)) h.set(RejectedHeader.Tenant, tenant);
    h.set(RejectedHeader.EventsSeq, String(m.seq));
    h.set(RejectedHeader.EventTime, new Date(Number(m.timestampNanos / 1_000_000n)).toISOString());
    h.set(RejectedHeader.Deliveries, String(m.info.deliveryCount));
    h.set(RejectedHeader.Size, String(m.data.byteLength));
    const producerId = m.headers?.get('Nats-Msg-Id');
    if (producerId) h.set(RejectedHeader.ProducerMsgId, producerId.slice(0, 200));
    const body = m.data.byteLength > deps.maxEventBytes ? m.data.subarray(0, deps.maxEventBytes) : m.data;
    if (body !== m.data) h.set(RejectedHeader.Truncated, '1');
    // One record per EVENTS message however often it is rejected (a term lost after the store).
    h.set('Nats-Msg-Id', `rejected.${m.seq}.${m.timestampNanos}`);
    try {
      await publisher.publish(rejectedSubject(tenant), body, h);
    } catch (e) {
      if (m.info.deliveryCount >= ROUTER_MAX_DELIVER) {
        // No delivery is left: the event stays in EVENTS (7 days), but the router will not be given it again.
        log.error('rejected event could not be stored, and this was its last delivery', { subject: m.subject, seq: m.seq, reason, store_error: describe(e) });
      }
      retry(m, `storing the rejection (${reason}) failed: ${describe(e)}`);
      return;
    }
    metrics.eventsRejected.inc({ reason });
    if (tracing.on) routingRejected(reason);
    log.warn('event rejected', { subject: m.subject, seq: m.seq, reason, detail });
    m.term();
  }

  return {
    reject, retry,
    arrived: (seq) => void handedBack.delete(seq),
    waiting() {
      const now = performance.now();
      let longestMs = 0;
      for (const [seq, w] of handedBack) {
        if (now > w.due + FORGET_AFTER_MS) handedBack.delete(seq);
        else longestMs = Math.max(longestMs, now - w.since);
      }
      return { events: handedBack.size, longestMs };
    },
  };
}

/** The detail of a routing exception: its class and message, never the event's body. */
export const exceptionDetail = (e: unknown): string => (e instanceof Error ? `${e.name}: ${e.message}` : describe(e));
