// The HTTP request of one attempt: the exact headers of spec section 2.2, signed with every live secret.
import { signatureHeader, type SigningKey } from '../domain/signature.ts';

export function deliveryHeaders(opts: { webhookId: string; event: string; keys: readonly SigningKey[]; body: Buffer; now: number }): Record<string, string> {
  // The timestamp is when THIS attempt is sent, so a retry hours later passes a receiver's 5-minute check.
  const timestamp = Math.floor(opts.now / 1000);
  return {
    'content-type': 'application/json',
    'webhook-id': opts.webhookId,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': signatureHeader(opts.keys, opts.webhookId, timestamp, opts.body),
    'service-webhook-event': opts.event,
  };
}
