// A producer's Nats-Msg-Id as hookstream deduplicates by it: scoped to its tenant (one tenant's id never
// stands for another's event) and hashed (it may hold any characters and be long; the hash is 22, and a
// NATS subject token: base64url has no `.`, `*` or `>`).
import { createHash } from 'node:crypto';

/** Nats-Msg-Id, the header JetStream deduplicates publishes by. */
export const MSG_ID_HEADER = 'Nats-Msg-Id';

export function scopedProducerId(tenant: string, producerMsgId: string): string {
  return createHash('sha256').update(`${tenant}\n${producerMsgId}`).digest().subarray(0, 16).toString('base64url');
}
