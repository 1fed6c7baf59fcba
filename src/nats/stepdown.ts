// Asking a JetStream consumer's leader to step down, so that another server of the cluster leads it. What
// the server answers is returned as text for a log line: a single server has no other to hand over to.
import type { NatsConnection } from '@nats-io/nats-core';
import { describe } from '../errors.ts';

export function consumerStepdown(nc: NatsConnection, timeoutMs = 5000): (stream: string, consumer: string) => Promise<string> {
  return async (stream, consumer) => {
    try {
      const m = await nc.request(`$JS.API.CONSUMER.LEADER.STEPDOWN.${stream}.${consumer}`, '', { timeout: timeoutMs });
      const answer = m.json<{ success?: boolean; error?: { description?: string } }>();
      return answer.success ? 'done' : `refused: ${answer.error?.description ?? 'no reason given'}`;
    } catch (e) {
      return `failed: ${describe(e)}`;
    }
  };
}
