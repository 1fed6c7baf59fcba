// `retry-now`: bring an endpoint's waiting retries forward. The deliveries wait at the server; only the
// delivery instance that failed one knows its ack subject (src/delivery/waiting-retries.ts), so the admin
// role asks every delivery instance on a subject inside the service's account and adds up their answers.
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import type { EndpointId } from '../domain/ids.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { WaitingRetries } from './waiting-retries.ts';

/** `hookstream.retry_now.<endpointId>`: published by the admin role, answered by each delivery instance. */
const RETRY_NOW_PREFIX = 'hookstream.retry_now.';
/** How long the admin role collects answers: every delivery instance answers at once from memory. */
const COLLECT_MS = 1000;

interface RetryNowAnswer { brought_forward: number }

/** Answer retry-now requests from this delivery instance's waiting retries. Returns the undo. */
export function serveRetryNow(nc: NatsConnection, retries: WaitingRetries, log: Logger): () => void {
  const sub: Subscription = nc.subscribe(`${RETRY_NOW_PREFIX}*`, {
    callback: (err, m) => {
      if (err) return log.warn('retry-now subscription failed', { reason: describe(err) });
      const endpoint = m.subject.slice(RETRY_NOW_PREFIX.length) as EndpointId;
      const answer: RetryNowAnswer = { brought_forward: retries.bringForward(endpoint) };
      if (answer.brought_forward > 0) log.info('waiting retries brought forward', { endpoint, deliveries: answer.brought_forward });
      if (m.reply) m.respond(JSON.stringify(answer));
    },
  });
  return () => sub.unsubscribe();
}

/** Ask every delivery instance; resolves with how many waiting deliveries they handed back to the server. */
export async function requestRetryNow(nc: NatsConnection, endpoint: EndpointId): Promise<{ broughtForward: number; instances: number }> {
  let broughtForward = 0;
  let instances = 0;
  const answers = await nc.requestMany(`${RETRY_NOW_PREFIX}${endpoint}`, '', { maxWait: COLLECT_MS, strategy: 'timer' });
  for await (const m of answers) {
    if (m.data.length === 0) continue; // no responders
    const a = m.json<Partial<RetryNowAnswer>>();
    if (typeof a.brought_forward !== 'number') continue;
    broughtForward += a.brought_forward;
    instances++;
  }
  return { broughtForward, instances };
}
