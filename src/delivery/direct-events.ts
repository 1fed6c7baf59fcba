// Direct delivery (streams/direct.ts): what a copy of an event in its tenant's partition stream becomes
// for an endpoint: its type, webhook-id and body, made once per event in this process and shared by every
// endpoint of the tenant that takes it. An event the router refuses (it does not parse, its ordering key
// or its delivery body does not fit) is never sent: the router writes it down as rejected.
import { DELIVERY_MAX_BODY } from '../../streams/deliveries.ts';
import { isPartitionStream, sourcedSeq } from '../../streams/events.ts';
import { matchesAny, type EventName, type EventPattern } from '../domain/catalogue.ts';
import { encodeDelivery, parseEvent, type EventLimits } from '../domain/event-data.ts';
import { orderingKeyOf } from '../domain/ordering-key.ts';
import { orderingHeader } from '../nats/ordering-header.ts';
import { MSG_ID_HEADER, scopedProducerId } from '../domain/producer-id.ts';
import type { WebhookIdCodec } from '../domain/webhook-id.ts';
import type { PulledMsg } from '../nats/pulled-msg.ts';

export interface DirectEvent {
  /** Its EVENTS sequence. */
  seq: number;
  event: EventName;
  webhookId: string;
  body: Buffer;
  /** The producer's Nats-Msg-Id scoped to the tenant, when it set one (src/delivery/producer-claims.ts). */
  producerId?: string;
}

export interface DirectEvents {
  /** Whether `m` is a copy of an event (a partition stream's), not a queued delivery. */
  is(m: Pick<PulledMsg, 'info'>): boolean;
  /**
   * Whether the endpoint takes it, by its subject alone (`events.<tenant>.<p>.<type>`): of its tenant (its
   * consumer's filter says so already; checked again, since a partition stream holds other tenants'
   * events) and of a type it takes (its filter may have changed since the message was handed out).
   */
  taken(m: Pick<PulledMsg, 'subject'>, endpoint: { tenant: string; events: readonly EventPattern[] }): boolean;
  /** What to send; undefined for an event the router refuses. */
  of(m: Pick<PulledMsg, 'subject' | 'data' | 'headers'>): DirectEvent | undefined;
}

/** Events kept made in this process: an event's endpoints pull it within moments of each other. */
const KEPT = 4096;
/**
 * And their bodies' bytes at most: a tenant publishing events of the largest size would otherwise have
 * 4,096 of them (up to 2 GB) kept in every delivery process. An event pushed out is made again if asked.
 */
export const KEPT_BYTES = 32 * 1024 * 1024;

export function createDirectEvents(deps: { webhookIds: WebhookIdCodec; epochMs: number; limits: EventLimits }): DirectEvents {
  const kept = new Map<number, DirectEvent | null>();
  let keptBytes = 0;

  function make(seq: number, m: Pick<PulledMsg, 'subject' | 'data' | 'headers'>): DirectEvent | null {
    const parsed = parseEvent(m.subject, m.data, deps.limits);
    if (!parsed.ok) return null;
    if (!orderingKeyOf(parsed.type, parsed.data, orderingHeader(m.headers)).ok) return null;
    const encoded = encodeDelivery(parsed.type, parsed.data, DELIVERY_MAX_BODY);
    if (!encoded.ok) return null;
    const producerId = m.headers?.get(MSG_ID_HEADER);
    return {
      seq, event: parsed.type, webhookId: deps.webhookIds.encode({ seq, ms: deps.epochMs }), body: encoded.body,
      ...(producerId ? { producerId: scopedProducerId(parsed.tenant, producerId) } : {}),
    };
  }

  return {
    is: (m) => isPartitionStream(m.info.stream),
    taken(m, endpoint) {
      const tenant = `events.${endpoint.tenant}.`;
      if (!m.subject.startsWith(tenant)) return false;
      // The type starts after the partition's token.
      const at = m.subject.indexOf('.', tenant.length);
      return at > 0 && matchesAny(endpoint.events, m.subject.slice(at + 1) as EventName);
    },
    of(m) {
      const seq = sourcedSeq(m.headers);
      if (seq === undefined) return undefined;
      let e = kept.get(seq);
      if (e === undefined) {
        e = make(seq, m);
        kept.set(seq, e);
        keptBytes += e?.body.byteLength ?? 0;
        while (kept.size > KEPT || keptBytes > KEPT_BYTES) {
          const [oldest, made] = kept.entries().next().value!;
          kept.delete(oldest);
          keptBytes -= made?.body.byteLength ?? 0;
        }
      }
      return e ?? undefined;
    },
  };
}
