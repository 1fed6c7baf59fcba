// The original delivery message as it is sealed into a dead letter, and opened again for inspection or
// replay: subject, every header and the exact body bytes.
import type { MsgHdrs } from '@nats-io/nats-core';

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
