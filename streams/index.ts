// Every stream the service needs, created or brought up to date in one call at start-up.
import type { JetStreamManager } from '@nats-io/jetstream';
import { ensureEventsStream } from './events.ts';
import { ensureEndpointsStream } from './endpoints.ts';
import { ensureDeliveryStreams } from './deliveries.ts';
import { ensureDeadLetterStream } from './dead-letters.ts';
import { ensureAttemptsStream } from './attempts.ts';

export async function ensureStreams(jsm: JetStreamManager, opts: { shards: number; retrySchedule: number[] }): Promise<void> {
  await ensureEndpointsStream(jsm);
  await ensureEventsStream(jsm);
  await ensureDeliveryStreams(jsm, opts.shards);
  await ensureDeadLetterStream(jsm, opts.shards);
  await ensureAttemptsStream(jsm, opts.retrySchedule);
}
