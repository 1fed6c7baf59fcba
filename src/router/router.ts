// The router: reads EVENTS through its durable consumer, checks each event, and fans it out to the
// DELIVERIES stream of every active endpoint of the tenant whose subscription matches. Publishes are
// idempotent (Nats-Msg-Id per endpoint, see dedupe.ts), and the event is acked only after its whole
// fan-out is stored, so a crash or redelivery never loses or doubles a delivery.
import type { JetStreamClient, JsMsg } from '@nats-io/jetstream';
import { headers as natsHeaders } from '@nats-io/nats-core';
import { EVENTS_STREAM, ROUTER_CONSUMER } from '../../streams/events.ts';
import { DeliveryHeader, deliveryAddress } from '../../streams/deliveries.ts';
import { matchesAny } from '../domain/catalogue.ts';
import { parseEvent } from '../domain/event-data.ts';
import type { TenantId } from '../domain/ids.ts';
import type { EndpointDirectory } from '../endpoints/directory.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { describe } from '../errors.ts';
import type { AckedPublisher } from '../nats/acked-publisher.ts';
import type { WebhookIdCodec } from '../domain/webhook-id.ts';
import { fanOutMsgId, MSG_ID_HEADER } from './dedupe.ts';

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

  const route = (m: JsMsg): Promise<void> | undefined => {
    metrics.eventsReceived.inc();
    const parsed = parseEvent(m.subject, m.data);
    if (!parsed.ok) {
      metrics.eventsRejected.inc({ reason: parsed.reason });
      log.warn('event rejected', { subject: m.subject, seq: m.seq, reason: parsed.reason, detail: parsed.detail });
      m.term();
      return undefined;
    }
    const targets = [...directory.activeFor(parsed.tenant as TenantId)].filter((e) => matchesAny(e.events, parsed.type));
    if (targets.length === 0) {
      m.ack();
      return undefined;
    }
    const webhookId = deps.webhookIds.encode({ seq: m.seq, ms: Number(m.timestampNanos / 1_000_000n) });
    const producerMsgId = m.headers?.get(MSG_ID_HEADER) || undefined;
    // Encoded once for the whole fan-out, not once per target.
    const body = Buffer.from(JSON.stringify({ type: parsed.type, data: parsed.data }));
    const publishes = targets.map((endpoint) => {
      const h = natsHeaders();
      h.set(DeliveryHeader.WebhookId, webhookId);
      h.set(DeliveryHeader.Event, parsed.type);
      h.set(DeliveryHeader.Tenant, parsed.tenant);
      h.set(DeliveryHeader.Endpoint, endpoint.id);
      h.set(MSG_ID_HEADER, fanOutMsgId(parsed.tenant, producerMsgId, webhookId, endpoint.id));
      return publisher.publish(deliveryAddress(endpoint.id, deps.shards).subject, body, h);
    });
    inFlight += publishes.length;
    const done = Promise.all(publishes).then(
      () => {
        metrics.deliveriesEnqueued.inc({}, publishes.length);
        m.ack();
      },
      (e: unknown) => {
        // Not acked: the event comes back after the consumer's ack wait; duplicates are dropped by msgID.
        log.warn('fan-out failed, event will be retried', { subject: m.subject, seq: m.seq, reason: describe(e) });
      },
    ).finally(() => {
      inFlight -= publishes.length;
      publishesDone.delete(done);
      slotFreed?.();
    });
    publishesDone.add(done);
    return done;
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
        log.error('routing failed, event will be retried', { subject: m.subject, seq: m.seq, reason: describe(e) });
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
