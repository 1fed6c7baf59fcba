// Where the router puts a delivery of an ordered endpoint (issue 21): on its key's subject, with the key
// in a header, when the endpoint has `ordering: key` and the event has a key; on the plain subject else.
import type { MsgHdrs } from '@nats-io/nats-core';
import { deliveryAddress, DeliveryHeader, keyedSubject, QUEUE_FULL_CODE } from '../../streams/deliveries.ts';
import { PublishRejectedError } from '../nats/acked-publisher.ts';
import type { HeaderBlock } from '../nats/header-block.ts';
import type { KeyedQueueBound } from './keyed-bound.ts';
import { Ordering, type EndpointState } from '../domain/endpoint.ts';
import type { EventName } from '../domain/catalogue.ts';
import type { EventData } from '../domain/event-data.ts';
import { orderingKeyOf, orderingToken } from '../domain/ordering-key.ts';
import { orderingHeader } from '../nats/ordering-header.ts';

export interface EventOrdering {
  key: string;
  /** The key's subject token, computed once per event. */
  token: string;
}

export type EventOrderingResult = { ok: true; ordering: EventOrdering | undefined } | { ok: false; detail: string };

/** The ordering key of an event as the router read it: the producer's header (any case), or the data's. */
export function eventOrdering(headers: MsgHdrs | undefined, tenant: string, type: EventName, data: EventData): EventOrderingResult {
  const r = orderingKeyOf(type, data, orderingHeader(headers));
  if (!r.ok) return r;
  return { ok: true, ordering: r.key === undefined ? undefined : { key: r.key, token: orderingToken(tenant, r.key) } };
}

/**
 * The subject of one delivery, with its headers; a keyed one gets the key header and its barrier (`after`,
 * src/router/tenant-progress.ts), and `full` when its endpoint is at its queue bound
 * (src/router/keyed-bound.ts): refused as JetStream refuses a full subject; else `bounded`, counted by the
 * bound until the router tells it the publish was answered.
 */
export function deliverySubject(
  endpoint: Pick<EndpointState, 'id' | 'ordering'>, shards: number, ordering: EventOrdering | undefined, h: HeaderBlock, bound: KeyedQueueBound,
  after: () => number,
): { subject: string; h: HeaderBlock; full?: PublishRejectedError; bounded?: true } {
  if (ordering === undefined || endpoint.ordering !== Ordering.Key) return { subject: deliveryAddress(endpoint.id, shards).subject, h };
  h.add(DeliveryHeader.OrderingKey, ordering.key);
  h.add(DeliveryHeader.OrderedAfter, String(after()));
  const subject = keyedSubject(endpoint.id, shards, ordering.token);
  // Not full: counted by the bound until its publish is answered (bound.answered).
  if (!bound.full(endpoint.id)) return { subject, h, bounded: true };
  return { subject, h, full: new PublishRejectedError('the ordered endpoint\'s queue is full', QUEUE_FULL_CODE) };
}
