// One trace per event, whichever path delivers it. On the queue path the router's span reaches every
// attempt through the delivery message's headers; with direct delivery an endpoint reads the event
// itself, and no message passes between the router and its attempts. So the router's span of an event
// takes ids derived from the event (its webhook-id: one per EVENTS message, the same in every process),
// and a direct attempt names that span as its parent without being told: no publish, no lookup. An event
// whose producer sent a trace context keeps the producer's trace id; one without gets a trace id derived
// the same way.
import { createHash } from 'node:crypto';
import { ROOT_CONTEXT, trace, TraceFlags, type Context, type SpanContext } from '@opentelemetry/api';

/**
 * The router's span of an event (its first routing) and, for an event without a producer's context, its
 * trace: from a hash of its webhook-id, which is keyed (src/domain/webhook-id.ts), so the ids are as
 * unpredictable as random ones without the master key.
 */
export function eventSpanIds(webhookId: string): { traceId: string; spanId: string } {
  const hex = createHash('sha256').update('hookstream trace v1\0').update(webhookId).digest('hex');
  return { traceId: hex.slice(0, 32), spanId: hex.slice(32, 48) };
}

/**
 * Whether the router's span of an event without a producer's context is sampled, as this process's
 * sampler would decide it (OTEL_TRACES_SAMPLER, read as the SDK reads it): a direct attempt's parent is
 * only named, never seen, so its flag is told here. A ratio sampler decides by trace id, the same id on
 * both sides: `traceidratio` decides the attempt by it too; under `parentbased_traceidratio` the attempt
 * follows this flag, sampled, even when its router's span was not.
 */
function rootFlags(): TraceFlags {
  const sampler = process.env['OTEL_TRACES_SAMPLER']?.trim();
  return sampler === 'always_off' || sampler === 'parentbased_always_off' ? TraceFlags.NONE : TraceFlags.SAMPLED;
}
let flags: TraceFlags | undefined;

/**
 * The router's first span of an event as a remote parent: in the producer's trace (`producer`, the
 * context the event carries, whose sampling the router's span follows) or in the event's own.
 */
export function routerSpanOf(producer: SpanContext | undefined, webhookId: string): SpanContext {
  const ids = eventSpanIds(webhookId);
  return {
    traceId: producer?.traceId ?? ids.traceId, spanId: ids.spanId, isRemote: true,
    traceFlags: producer ? producer.traceFlags : (flags ??= rootFlags()),
    ...(producer?.traceState ? { traceState: producer.traceState } : {}),
  };
}

/** The same as a context to start a child span in. */
export const routerContextOf = (producer: SpanContext | undefined, webhookId: string): Context =>
  trace.setSpanContext(ROOT_CONTEXT, routerSpanOf(producer, webhookId));
