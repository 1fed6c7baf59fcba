// Publishing operational events (streams/ops.ts) on `ops.<tenant>.<type>`. Each carries a Nats-Msg-Id
// made from what it reports, so the same fact published twice (two instances, a retry) is stored once.
import type { JetStreamClient } from '@nats-io/jetstream';
import { opsSubject, type OpsEvent } from '../../streams/ops.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { describe } from '../errors.ts';

export interface OpsEvents {
  /** Resolves once stored; rejects when JetStream refuses or does not answer. */
  publish(event: OpsEvent, msgId: string): Promise<void>;
  /** The same, but a failure is logged and swallowed: for facts already made durable elsewhere. */
  publishQuietly(event: OpsEvent, msgId: string): Promise<void>;
}

export function createOpsEvents(deps: { js: JetStreamClient; log: Logger; metrics: ServiceMetrics }): OpsEvents {
  async function publish(event: OpsEvent, msgId: string): Promise<void> {
    const ack = await deps.js.publish(opsSubject(event.tenant, event.type), JSON.stringify(event), { msgID: msgId });
    if (!ack.duplicate) deps.metrics.opsEventsPublished.inc({ type: event.type });
  }
  return {
    publish,
    async publishQuietly(event, msgId) {
      try {
        await publish(event, msgId);
      } catch (e) {
        deps.log.warn('could not publish operational event', { type: event.type, endpoint: event.endpoint, reason: describe(e) });
      }
    },
  };
}
