// Traces of the delivery path, written by hand: there is no maintained instrumentation for nats.js v3.
// The W3C trace context travels in NATS message headers, from the producer's publish to EVENTS, through
// the router's fan-out into each delivery message, to every attempt, whichever instance makes it (with
// direct delivery no message passes from the router to an attempt: the router's span is named from the
// event itself, event-trace.ts); a dead letter keeps it in its sealed message, and its replay starts a
// new trace linked to it. Only `traceparent`/`tracestate` are read and written here: `baggage` is never
// carried, so it cannot reach a receiver. Everything is behind `tracing.on`, false unless the SDK started
// (sdk.ts): with tracing off the hot path tests that boolean per event, per fan-out message and per
// attempt, and does nothing else.
import {
  context, createTraceState, isSpanContextValid, ROOT_CONTEXT, SpanKind, SpanStatusCode, trace,
  type Attributes, type Context, type Span, type SpanContext,
} from '@opentelemetry/api';
import {
  ATTR_ERROR_TYPE, ATTR_HTTP_REQUEST_METHOD, ATTR_HTTP_REQUEST_RESEND_COUNT, ATTR_HTTP_RESPONSE_STATUS_CODE, ATTR_SERVER_ADDRESS,
  ATTR_SERVER_PORT, ATTR_URL_SCHEME,
} from '@opentelemetry/semantic-conventions';
import type { MsgHdrs } from '@nats-io/nats-core';
import { eventSpanIds, routerContextOf } from './event-trace.ts';
import { withIds } from './span-ids.ts';

export const tracing = {
  /** Set once the SDK has started (sdk.ts). */
  on: false,
  /** HOOKSTREAM_FORWARD_TRACEPARENT: attempts send the receiver a `traceparent` naming their span. */
  forwardTraceparent: false,
};

/** The instrumentation scope of every span below. */
const tracer = () => trace.getTracer('hookstream');

/** Incubating messaging attributes (semantic conventions 1.45), copied as the conventions advise. */
const MESSAGING_SYSTEM = 'messaging.system';
const MESSAGING_OPERATION_NAME = 'messaging.operation.name';
const MESSAGING_OPERATION_TYPE = 'messaging.operation.type';
const MESSAGING_DESTINATION_NAME = 'messaging.destination.name';
const MESSAGING_CONSUMER_GROUP_NAME = 'messaging.consumer.group.name';

/** hookstream's own attributes. */
export const Attr = {
  EventSequence: 'hookstream.event.sequence',
  DeliveryCount: 'hookstream.delivery_count',
  Endpoint: 'hookstream.endpoint.id',
  Tenant: 'hookstream.tenant',
  Event: 'hookstream.event.type',
  WebhookId: 'hookstream.webhook.id',
  Replay: 'hookstream.replay',
  DeadLetter: 'hookstream.dead_letter.id',
  Attempts: 'hookstream.attempts',
  Deliveries: 'hookstream.deliveries',
  Rejected: 'hookstream.rejected',
} as const;

// The W3C trace context, read and written here rather than with @opentelemetry/core's propagator: this
// module is loaded with tracing off too, and core, once imported, turns stderr's pipe non-blocking (the
// log writer's fd, src/log.ts).
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
export const TRACEPARENT_HEADER = 'traceparent';
const TRACESTATE_HEADER = 'tracestate';

/** The span context of a `traceparent` value (and its `tracestate`), if it is a valid one. */
export function spanContextOf(traceparent: string | undefined, tracestate?: string): SpanContext | undefined {
  const m = traceparent ? TRACEPARENT.exec(traceparent.trim()) : null;
  if (!m) return undefined;
  const sc: SpanContext = {
    traceId: m[1]!, spanId: m[2]!, traceFlags: parseInt(m[3]!, 16) & 1, isRemote: true,
    ...(tracestate ? { traceState: createTraceState(tracestate) } : {}),
  };
  return isSpanContextValid(sc) ? sc : undefined;
}

/** The span context a message carries (producers set `traceparent`), if any. */
const carriedBy = (h: MsgHdrs | undefined): SpanContext | undefined =>
  h ? spanContextOf(h.get(TRACEPARENT_HEADER), h.get(TRACESTATE_HEADER) || undefined) : undefined;

/** The trace context a message carries, or none. */
export function contextOf(h: MsgHdrs | undefined): Context {
  const sc = carriedBy(h);
  return sc ? trace.setSpanContext(ROOT_CONTEXT, sc) : ROOT_CONTEXT;
}

/**
 * The context of a partition stream's copy of an event (direct delivery): the router's first span of the
 * event, named from the event itself (event-trace.ts), as a queued delivery's headers would carry it.
 */
export const directContextOf = (h: MsgHdrs | undefined, webhookId: string): Context => routerContextOf(carriedBy(h), webhookId);

/** The W3C `traceparent` of a span context. */
const traceparentFrom = (sc: SpanContext): string => `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, '0')}`;

/** Write the (active) span's context into a message's headers, for whoever consumes it. */
export function carryContext(h: MsgHdrs, ctx: Context = context.active()): void {
  writeContext((name, value) => h.set(name, value), ctx);
}

/** The same for a header block being written (src/nats/header-block.ts): each header given to `add`. */
export function writeContext(add: (name: string, value: string) => void, ctx: Context = context.active()): void {
  const sc = trace.getSpanContext(ctx);
  if (!sc || !isSpanContextValid(sc)) return;
  add(TRACEPARENT_HEADER, traceparentFrom(sc));
  const state = sc.traceState?.serialize();
  if (state) add(TRACESTATE_HEADER, state);
}

/** `trace_id` and `span_id` of the active span, for log lines; undefined outside one. */
export function activeTraceFields(): { trace_id: string; span_id: string } | undefined {
  const sc = trace.getActiveSpan()?.spanContext();
  return sc && isSpanContextValid(sc) ? { trace_id: sc.traceId, span_id: sc.spanId } : undefined;
}

/** The W3C `traceparent` naming a span (what a receiver gets with HOOKSTREAM_FORWARD_TRACEPARENT). */
export const traceparentOf = (span: Span): string => traceparentFrom(span.spanContext());

/** End a span when `work` settles (marked as an error if it throws); `work` itself is returned untouched. */
function endWith<T extends Promise<unknown> | undefined>(span: Span, work: T): T {
  if (!work) { span.end(); return work; }
  work.then(() => span.end(), (e: unknown) => {
    span.setStatus({ code: SpanStatusCode.ERROR, message: e instanceof Error ? e.message : String(e) });
    span.end();
  });
  return work;
}

/**
 * The router's processing of one event: a CONSUMER span, child of the producer's context when its
 * message carries one (else the root of the event's trace), active while `route` runs so the fan-out
 * publishes carry it on (carryContext). Its first routing's span has the ids derived from the event's
 * webhook-id (event-trace.ts), which a direct attempt names as its parent; a later routing (the first
 * failed or stopped) is a span of its own in the same trace, a child of the first when no producer's is.
 */
export function traceRouting<T extends Promise<unknown> | undefined>(
  m: { subject: string; seq: number; headers?: MsgHdrs; info: { deliveryCount: number } }, consumer: string, webhookId: string, route: () => T,
): T {
  const producer = carriedBy(m.headers);
  const first = m.info.deliveryCount === 1;
  const parent = producer ? trace.setSpanContext(ROOT_CONTEXT, producer) : first ? ROOT_CONTEXT : routerContextOf(undefined, webhookId);
  const start = () => tracer().startSpan('process EVENTS', {
    kind: SpanKind.CONSUMER,
    attributes: {
      [MESSAGING_SYSTEM]: 'nats', [MESSAGING_OPERATION_NAME]: 'process', [MESSAGING_OPERATION_TYPE]: 'process',
      [MESSAGING_DESTINATION_NAME]: m.subject, [MESSAGING_CONSUMER_GROUP_NAME]: consumer,
      [Attr.EventSequence]: m.seq, [Attr.DeliveryCount]: m.info.deliveryCount,
    },
  }, parent);
  const span = first ? withIds(eventSpanIds(webhookId), start) : start();
  return endWith(span, context.with(trace.setSpan(parent, span), route));
}

/** Add attributes to the active span (the router's, an attempt's), if there is one. */
export const noteOnActiveSpan = (attributes: Attributes): void => void trace.getActiveSpan()?.setAttributes(attributes);

/** The event the active router span processes was rejected (stored in REJECTED, never delivered). */
export function routingRejected(reason: string): void {
  const span = trace.getActiveSpan();
  span?.setAttribute(Attr.Rejected, reason);
  span?.setStatus({ code: SpanStatusCode.ERROR, message: `rejected: ${reason}` });
}

export interface AttemptFacts {
  endpoint: string;
  tenant: string;
  event: string;
  webhookId: string;
  url: string;
  /** 1 for the first attempt. */
  attempt: number;
  replay?: string | undefined;
}

/**
 * One delivery attempt: an HTTP CLIENT span `POST`, child of `parent`: the context its delivery message
 * carries (the router's span, or a replay's; contextOf), or for a direct copy the router's span named
 * from the event (directContextOf). Active while `run` runs so its log lines name it.
 */
export function traceAttempt<T>(parent: Context, a: AttemptFacts, run: (span: Span) => Promise<T>): Promise<T> {
  let server: Attributes = {};
  try {
    const u = new URL(a.url);
    // Host and port only: an endpoint's path or query may hold the receiver's own token.
    server = { [ATTR_URL_SCHEME]: u.protocol.slice(0, -1), [ATTR_SERVER_ADDRESS]: u.hostname, [ATTR_SERVER_PORT]: Number(u.port) || (u.protocol === 'https:' ? 443 : 80) };
  } catch { /* the sender refuses it and says why */ }
  const span = tracer().startSpan('POST', {
    kind: SpanKind.CLIENT,
    attributes: {
      [ATTR_HTTP_REQUEST_METHOD]: 'POST', [ATTR_HTTP_REQUEST_RESEND_COUNT]: a.attempt - 1, ...server,
      [Attr.Endpoint]: a.endpoint, [Attr.Tenant]: a.tenant, [Attr.Event]: a.event, [Attr.WebhookId]: a.webhookId,
      ...(a.replay ? { [Attr.Replay]: Number(a.replay) } : {}),
    },
  }, parent);
  return context.with(trace.setSpan(parent, span), () => run(span)).finally(() => {
    if (span.isRecording()) span.end();
  });
}

/** The attempt's answer (or failure) on its span, which ends here: what follows is hookstream's, not the POST's. */
export function attemptAnswered(span: Span, outcome: { ok: boolean; status: number | null; kind?: string; error?: string }): void {
  if (outcome.status !== null) span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, outcome.status);
  if (!outcome.ok) {
    // error.type: the status code for an answer, else what failed (timeout, connection, ...).
    span.setAttribute(ATTR_ERROR_TYPE, outcome.kind === 'status' && outcome.status !== null ? String(outcome.status) : outcome.kind ?? 'error');
    span.setStatus({ code: SpanStatusCode.ERROR, ...(outcome.error ? { message: outcome.error } : {}) });
  }
  span.end();
}

/** The trace id a message's traceparent names, if any (a dead letter's row keeps it). */
export const traceIdOf = (h: MsgHdrs | undefined): string | null => spanContextOf(h?.get(TRACEPARENT_HEADER))?.traceId ?? null;

/** A dead letter stored: an instant span in the delivery's trace, so the trace shows where it ended. */
export function traceDeadLetter(h: MsgHdrs | undefined, attributes: Attributes): void {
  tracer().startSpan('dead_letter', { kind: SpanKind.INTERNAL, attributes }, contextOf(h)).end();
}

/**
 * A publish that starts a trace: a PRODUCER span, root of a new trace, linked to `linkTo` (a
 * traceparent) when given: a dead letter's replay links to its original delivery's trace, the CLI's
 * `events publish` (a producer's) links to nothing. `carry` writes its context into the message's headers.
 */
export function startPublish(name: string, attributes: Attributes, linkTo?: string): { carry(h: MsgHdrs): void; end(): void } {
  const link = spanContextOf(linkTo);
  const span = tracer().startSpan(name, { kind: SpanKind.PRODUCER, root: true, attributes, ...(link ? { links: [{ context: link }] } : {}) });
  return {
    carry: (h) => carryContext(h, trace.setSpan(ROOT_CONTEXT, span)),
    end: () => span.end(),
  };
}

/** The attributes of a publish to EVENTS (the CLI's `events publish`). */
export const eventsPublishAttributes = (subject: string): Attributes => ({
  [MESSAGING_SYSTEM]: 'nats', [MESSAGING_OPERATION_NAME]: 'send', [MESSAGING_OPERATION_TYPE]: 'send', [MESSAGING_DESTINATION_NAME]: subject,
});

/** Header name of the trace id on API answers. */
export const TRACE_ID_HEADER = 'x-trace-id';
