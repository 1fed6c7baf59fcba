// ENDPOINT_HEALTH: since when an endpoint's attempts have all failed, one small record per endpoint
// (`endpoint_health.<endpointId>`, only the latest kept), written only when that changes (the first
// failure after a success, the first success after failures, a disable). It survives restarts and is
// shared by every delivery instance: each folds the stream live (src/delivery/endpoint-health.ts).
import { DiscardPolicy, RetentionPolicy, StorageType, type JetStreamManager } from '@nats-io/jetstream';
import { ensureStream, type EnsureOptions } from './ensure.ts';

export const ENDPOINT_HEALTH_STREAM = 'ENDPOINT_HEALTH';
export const endpointHealthSubject = (endpointId: string) => `endpoint_health.${endpointId}`;

/** Wire shape, version 1. `failing_since` null: the last attempt succeeded (or the clock was reset). */
export interface EndpointHealthRecord {
  v: 1;
  endpoint: string;
  failing_since: string | null;
  at: string;
}

export async function ensureEndpointHealthStream(jsm: JetStreamManager, opts?: EnsureOptions): Promise<void> {
  await ensureStream(jsm, {
    name: ENDPOINT_HEALTH_STREAM,
    subjects: ['endpoint_health.>'],
    retention: RetentionPolicy.Limits,
    storage: StorageType.File,
    discard: DiscardPolicy.Old,
    max_msgs_per_subject: 1,
    max_msg_size: 1024,
  }, opts);
}
