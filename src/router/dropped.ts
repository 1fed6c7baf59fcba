// A delivery the endpoint's queue refused (issue 17): the queue holds HOOKSTREAM_MAX_QUEUED deliveries and
// refuses the next (streams/deliveries.ts), keeping the oldest, which wait for a retry or a restore. The
// refusal is the router's to make visible: a failed-attempt-style record in ATTEMPTS, so
// `deliveries show` answers `dropped` rather than `acknowledged`; a counter; and, at most once a minute per
// endpoint, a warning and an `endpoint.queue_full` operational event. The event is routed all the same:
// a retry would be refused again, and it would hold up the tenant's other endpoints.
import { attemptSubject, type AttemptRecord } from '../../streams/attempts.ts';
import { OpsEventType } from '../../streams/ops.ts';
import type { EndpointState } from '../domain/endpoint.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import type { AckedPublisher } from '../nats/acked-publisher.ts';
import type { OpsEvents } from '../ops/events.ts';
import type { AttemptLogRecorder } from '../deliverylog/recorder.ts';

/** One warning and one operational event per endpoint per this long, however many are dropped. */
const NOTICE_EVERY_MS = 60_000;

export interface DroppedDeliveries {
  /** Record that `endpoint`'s queue refused this delivery; resolves once the record is stored (or given up). */
  record(endpoint: EndpointState, delivery: { webhookId: string; event: string }): Promise<void>;
}

export function createDroppedDeliveries(deps: {
  publisher: AckedPublisher; ops: OpsEvents | undefined; metrics: ServiceMetrics; log: Logger; maxQueued: number;
  attemptLog?: AttemptLogRecorder | undefined;
}): DroppedDeliveries {
  const { publisher, log } = deps;
  // Endpoint id → when this process last gave notice; a few entries (only endpoints whose queue is full).
  const noticed = new Map<string, number>();

  const notice = (endpoint: EndpointState, webhookId: string, event: string): void => {
    const now = Date.now();
    const minute = Math.floor(now / NOTICE_EVERY_MS);
    if (noticed.get(endpoint.id) === minute) return;
    if (noticed.size >= 10_000) for (const [id, m] of noticed) if (m < minute) noticed.delete(id);
    noticed.set(endpoint.id, minute);
    log.warn('endpoint queue full: deliveries are dropped', {
      endpoint: endpoint.id, tenant: endpoint.tenant, max_queued: deps.maxQueued, webhook_id: webhookId,
    });
    // The same minute's notice from every instance is stored once (Nats-Msg-Id).
    void deps.ops?.publishQuietly({
      v: 1, type: OpsEventType.EndpointQueueFull, tenant: endpoint.tenant, endpoint: endpoint.id,
      at: new Date(now).toISOString(), max_queued: deps.maxQueued, webhook_id: webhookId, event_type: event,
    }, `queue_full.${endpoint.id}.${minute}`);
  };

  return {
    async record(endpoint, { webhookId, event }) {
      deps.metrics.deliveriesDropped.inc();
      notice(endpoint, webhookId, event);
      const record: AttemptRecord = {
        v: 1, endpoint: endpoint.id, webhook_id: webhookId, event, attempt: 0, at: new Date().toISOString(), duration_ms: 0,
        status: null, error: `dropped: the endpoint's queue holds ${deps.maxQueued} deliveries`, next_attempt_at: null, dropped: 'queue_full',
      };
      deps.attemptLog?.record({
        tenant: endpoint.tenant, endpoint: endpoint.id, webhook_id: webhookId, event, attempt: 0, at: Date.parse(record.at), duration_ms: 0,
        status: null, outcome: 'dropped', error: record.error!,
      });
      await publisher.publish(attemptSubject(endpoint.id, webhookId), JSON.stringify(record)).catch((e: unknown) =>
        log.warn('could not record a dropped delivery', { endpoint: endpoint.id, webhook_id: webhookId, reason: describe(e) }));
    },
  };
}
