// The Nats-Msg-Id of a fan-out publish, which is where hookstream deduplicates a producer's events.
// JetStream deduplicates by Nats-Msg-Id per stream, across every tenant, so EVENTS keeps only the 100 ms
// minimum window (one tenant's id must not drop another's event) and the router scopes the producer's id
// to its tenant here: the DELIVERIES streams' 2-minute window then drops a retried publish's second copy.
import { createHash } from 'node:crypto';

/** Nats-Msg-Id, the header JetStream deduplicates publishes by. */
export const MSG_ID_HEADER = 'Nats-Msg-Id';

/**
 * `<tenant-scoped producer id>.<endpoint>` when the producer set a Nats-Msg-Id (a retried publish stored
 * twice in EVENTS then fans out once), else `<webhook-id>.<endpoint>` (a re-routed event fans out once).
 * The producer's id is hashed: it may hold any characters and be long, and the hash keeps it to 22.
 */
export function fanOutMsgId(tenant: string, producerMsgId: string | undefined, webhookId: string, endpointId: string): string {
  return `${fanOutMsgIdPrefix(tenant, producerMsgId, webhookId)}.${endpointId}`;
}

/** What comes before `.<endpoint>` in every fan-out publish of one event: hashed once per event, not per endpoint. */
export function fanOutMsgIdPrefix(tenant: string, producerMsgId: string | undefined, webhookId: string): string {
  if (!producerMsgId) return webhookId;
  return createHash('sha256').update(`${tenant}\n${producerMsgId}`).digest().subarray(0, 16).toString('base64url');
}
