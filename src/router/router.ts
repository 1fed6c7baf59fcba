// The router: reads EVENTS through its durable consumer, checks each event, and fans it out to the
// DELIVERIES stream of every active endpoint of the tenant whose subscription matches. Publishes are
// idempotent (Nats-Msg-Id per endpoint, see dedupe.ts), and the event is acked only after its whole
// fan-out is stored, so a crash or redelivery never loses or doubles a delivery.
import type { JetStreamClient, JsMsg } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { EVENTS_STREAM, ROUTER_CONSUMER } from '../../streams/events.ts';
import { DELIVERY_MAX_BODY, DeliveryHeader, deliveryAddress } from '../../streams/deliveries.ts';
import { matchesAny } from '../domain/catalogue.ts';
import { encodeDelivery, parseEvent, RejectionReason, type EventLimits } from '../domain/event-data.ts';
import type { TenantId } from '../domain/ids.ts';
import type { EndpointDirectory } from '../endpoints/directory.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { describe } from '../errors.ts';
import type { AckedPublisher } from '../nats/acked-publisher.ts';
import type { WebhookIdCodec } from '../domain/webhook-id.ts';
import { fanOutMsgId, MSG_ID_HEADER } from './dedupe.ts';
import { createVerdicts, exceptionDetail, isEventsFault, LAST_ROUTING_DELIVERY } from './verdict.ts';

/** At most this many fan-out publishes awaiting their ack at once. */
const MAX_PUBLISHES_IN_FLIGHT = 4096;
/** Events taken off the consumer and waiting to be routed, at most. */
const MAX_ARRIVED = 1024;

export interface Router {
  stop(): Promise<void>;
}

export async function startRouter(deps: {
  js: JetStreamClient;
  /** Fan-out publishes go through it rather than js.publish (src/nats/acked-publisher.ts). */
  publisher: AckedPublisher;
  directory: EndpointDirectory;
  shards: number;
  log: Logger;
  metrics: ServiceMetrics;
  /** Webhook ids from the event's place in EVENTS, so a redelivered event gets the same id. */
  webhookIds: WebhookIdCodec;
  /** Checked on every event before anything else (HOOKSTREAM_MAX_EVENT_BYTES, nesting depth). */
  limits: EventLimits;
}): Promise<Router> {
  const { js, directory, log, metrics } = deps;
  const consumer = await js.consumers.get(EVENTS_STREAM, ROUTER_CONSUMER);
  const messages = await consumer.consume({ max_messages: 512 });
  const { publisher } = deps;

  // Endpoint writes acked before an event was published must be visible when it is routed: a directory
  // sync that started after the event was pulled covers it, and covers every event pulled before too.
  let coveredUntil = -1;
  const ensureSynced = async (pulledAt: number) => {
    if (pulledAt < coveredUntil) return;
    const started = performance.now();
    await directory.sync();
    coveredUntil = Math.max(coveredUntil, started);
  };

  let inFlight = 0;
  let slotFreed: (() => void) | undefined;
  const publishesDone = new Set<Promise<void>>();
  const verdicts = createVerdicts({ publisher, maxEventBytes: deps.limits.maxBytes, log, metrics });

  // Fan-outs and rejections (a publish to REJECTED) hold slots until JetStream answers; stop() waits for them.
  const track = (work: Promise<void>, slots: number): Promise<void> => {
    inFlight += slots;
    const done = work.finally(() => {
      inFlight -= slots;
      publishesDone.delete(done);
      slotFreed?.();
    });
    publishesDone.add(done);
    return done;
  };
  const reject = (m: JsMsg, reason: RejectionReason, detail: string) => track(verdicts.reject(m, reason, detail), 1);

  // Every event leaves with a verdict: acked (routed), rejected (stored in REJECTED, terminated), or
  // handed back with nak(delay) when the failure was not its fault.
  const route = (m: JsMsg): Promise<void> | undefined => {
    metrics.eventsReceived.inc();
    // Back this often without a verdict: the router kept failing or stopping on it. No further try.
    if (m.info.deliveryCount > LAST_ROUTING_DELIVERY) {
      return reject(m, RejectionReason.RouteFailed, `no verdict after ${m.info.deliveryCount - 1} deliveries`);
    }
    try {
      return fanOut(m);
    } catch (e) {
      // Thrown while checking, matching or encoding this event: its own doing, a retry would throw again.
      return reject(m, RejectionReason.RouteFailed, exceptionDetail(e));
    }
  };

  const fanOut = (m: JsMsg): Promise<void> | undefined => {
    const parsed = parseEvent(m.subject, m.data, deps.limits);
    if (!parsed.ok) return reject(m, parsed.reason, parsed.detail);
    const targets = [...directory.activeFor(parsed.tenant as TenantId)].filter((e) => matchesAny(e.events, parsed.type));
    if (targets.length === 0) {
      m.ack();
      return undefined;
    }
    const webhookId = deps.webhookIds.encode({ seq: m.seq, ms: Number(m.timestampNanos / 1_000_000n) });
    const producerMsgId = m.headers?.get(MSG_ID_HEADER) || undefined;
    // Encoded once for the whole fan-out, not once per target.
    const encoded = encodeDelivery(parsed.type, parsed.data, DELIVERY_MAX_BODY);
    if (!encoded.ok) return reject(m, encoded.reason, encoded.detail);
    const body = encoded.body;
    // Every header is built before the first publish, so an exception cannot leave a fan-out half sent.
    const prepared = targets.map((endpoint) => {
      const h = natsHeaders();
      h.set(DeliveryHeader.WebhookId, webhookId);
      h.set(DeliveryHeader.Event, parsed.type);
      h.set(DeliveryHeader.Tenant, parsed.tenant);
      h.set(DeliveryHeader.Endpoint, endpoint.id);
      h.set(DeliveryHeader.EndpointVersion, String(endpoint.version));
      h.set(MSG_ID_HEADER, fanOutMsgId(parsed.tenant, producerMsgId, webhookId, endpoint.id));
      return { subject: deliveryAddress(endpoint.id, deps.shards).subject, h };
    });
    const publishes = prepared.map(({ subject, h }) => publisher.publish(subject, body, h));
    return track(Promise.all(publishes).then(
      () => {
        metrics.deliveriesEnqueued.inc({}, publishes.length);
        m.ack();
      },
      (e: unknown) => {
        if (isEventsFault(e)) return verdicts.reject(m, RejectionReason.TooLarge, describe(e));
        // NATS's trouble, not the event's: it comes back after a delay; duplicates are dropped by msgID.
        verdicts.retry(m, `fan-out failed: ${describe(e)}`);
        return undefined;
      },
    ), publishes.length);
  };

  // A pump takes events off the consumer as they arrive and stamps them, so one directory sync covers
  // every event that arrived before it started. Stamping at processing time instead made every event
  // wait for a sync of its own, one JetStream API round trip per event in series (issue 5: the router
  // then capped routing near 1k events/s and queued events for hundreds of ms at a steady 1k/s).
  const arrived: { m: JsMsg; at: number }[] = [];
  let wake: (() => void) | undefined;
  let space: (() => void) | undefined;
  let pumping = true;
  const pump = (async () => {
    try {
      for await (const m of messages) {
        arrived.push({ m, at: performance.now() });
        wake?.();
        while (arrived.length >= MAX_ARRIVED) await new Promise<void>((r) => (space = r));
      }
    } finally {
      pumping = false;
      wake?.();
    }
  })();

  const loop = (async () => {
    for (;;) {
      const next = arrived.shift();
      if (!next) {
        if (!pumping) break;
        await new Promise<void>((r) => (wake = r));
        wake = undefined;
        continue;
      }
      if (arrived.length < MAX_ARRIVED / 2) space?.();
      const { m, at } = next;
      try {
        await ensureSynced(at);
        route(m);
        while (inFlight >= MAX_PUBLISHES_IN_FLIGHT) await new Promise<void>((r) => (slotFreed = r));
      } catch (e) {
        // route() catches its own exceptions: this is the directory sync, NATS's trouble, not the event's.
        verdicts.retry(m, `routing failed: ${describe(e)}`);
      }
    }
  })();

  return {
    async stop() {
      await messages.close();
      await pump;
      await loop;
      await Promise.allSettled([...publishesDone]);
    },
  };
}
