// The Nats-Msg-Id of a fan-out publish, which is where hookstream deduplicates a producer's events.
// JetStream deduplicates by Nats-Msg-Id per stream, across every tenant, so EVENTS keeps only the 100 ms
// minimum window (one tenant's id must not drop another's event) and the router scopes the producer's id
// to its tenant here: the DELIVERIES streams' 2-minute window then drops a retried publish's second copy.
import { scopedProducerId } from '../domain/producer-id.ts';

/**
 * `<tenant-scoped producer id>.<endpoint>` when the producer set a Nats-Msg-Id (a retried publish stored
 * twice in EVENTS then fans out once), else `<webhook-id>.<endpoint>` (a re-routed event fans out once).
 * The producer's id is scoped to its tenant and hashed (src/domain/producer-id.ts).
 */
export function fanOutMsgId(tenant: string, producerMsgId: string | undefined, webhookId: string, endpointId: string): string {
  return `${fanOutMsgIdPrefix(tenant, producerMsgId, webhookId)}.${endpointId}`;
}

/** What comes before `.<endpoint>` in every fan-out publish of one event: hashed once per event, not per endpoint. */
export function fanOutMsgIdPrefix(tenant: string, producerMsgId: string | undefined, webhookId: string): string {
  return producerMsgId ? scopedProducerId(tenant, producerMsgId) : webhookId;
}
