// The original delivery message as it is sealed into a dead letter, and opened again for inspection or
// replay: subject, every header and the exact body bytes; and whether it is the delivery its row names.
import type { MsgHdrs } from '@nats-io/nats-core';
import { DeliveryHeader, isEndpointSubject } from '../../streams/deliveries.ts';
import type { DeadLetterRow } from './store.ts';

/** Wire shape inside the sealed box, version 1. */
export interface OriginalMessage {
  v: 1;
  subject: string;
  headers: Record<string, string[]>;
  body_base64: string;
}

export function captureMessage(subject: string, headers: MsgHdrs | undefined, body: Uint8Array): Uint8Array {
  const h: Record<string, string[]> = {};
  if (headers) for (const [k, v] of headers) h[k] = v;
  const original: OriginalMessage = { v: 1, subject, headers: h, body_base64: Buffer.from(body).toString('base64') };
  return new TextEncoder().encode(JSON.stringify(original));
}

export function parseOriginalMessage(bytes: Uint8Array): OriginalMessage {
  const x = JSON.parse(new TextDecoder().decode(bytes)) as Partial<OriginalMessage>;
  if (x.v !== 1 || typeof x.subject !== 'string' || typeof x.body_base64 !== 'string' || typeof x.headers !== 'object' || x.headers === null) {
    throw new Error('sealed dead letter does not hold a version-1 original message');
  }
  return x as OriginalMessage;
}

/** The first value of a header, by name in any case. */
export const originalHeader = (m: OriginalMessage, name: string): string | undefined =>
  Object.entries(m.headers).find(([k]) => k.toLowerCase() === name)?.[1]?.[0];

/**
 * How a sealed message differs from the row that holds it (subject, endpoint, tenant, webhook-id, event),
 * or undefined when it is the row's delivery. `shards` places the endpoint's delivery subject.
 */
export function recordMismatch(row: Pick<DeadLetterRow, 'endpoint_id' | 'tenant' | 'webhook_id' | 'event_type'>, m: OriginalMessage, shards: number): string | undefined {
  // A keyed delivery (issue 21) was on its key's subject of the endpoint; its replay goes to the plain one.
  if (!isEndpointSubject(m.subject, row.endpoint_id, shards)) return 'its subject is not the endpoint\'s delivery subject';
  const expected: [string, string][] = [
    [DeliveryHeader.Endpoint, row.endpoint_id], [DeliveryHeader.Tenant, row.tenant],
    [DeliveryHeader.WebhookId, row.webhook_id], [DeliveryHeader.Event, row.event_type],
  ];
  for (const [name, value] of expected) if (originalHeader(m, name) !== value) return `its ${name} header is not the record's`;
  for (const name of [DeliveryHeader.EndpointVersion, DeliveryHeader.EventSeq]) {
    const v = originalHeader(m, name);
    if (v !== undefined && !/^[1-9][0-9]{0,15}$/.test(v)) return `its ${name} header is not a sequence`;
  }
  return undefined;
}
