// The delivery role: one durable consumer per active endpoint, each with its own pull loop, so a slow
// or dead endpoint only ever occupies its own in-flight slots (max_ack_pending). A 2xx acks; a failure
// is recorded and left unacked, and JetStream's backoff brings the next attempt; when the last allowed
// attempt fails, a plain nak makes the server raise the max-deliveries advisory at once (dead letter).
// Issue 10: a 429/503 Retry-After pushes the next attempt later (nak with a computed delay), 429s shrink the
// endpoint's concurrency in this process (AIMD), and a rate-limited endpoint keeps each consumer slot for a
// second after its attempt, so the server's max_ack_pending enforces the limit across every instance.
//
// The jobs apart: attempt.ts (one attempt and its message's fate), pull-loop.ts (an endpoint's pull loop
// and concurrency), consumers.ts (consumers following endpoint changes), in-flight.ts (held messages).
import type { JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import type { EndpointDirectory } from '../endpoints/directory.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import type { AckedPublisher } from '../nats/acked-publisher.ts';
import type { ConsumerLeaders } from '../nats/consumer-leaders.ts';
import { createAttempts, type SecretOpener, type Sender } from './attempt.ts';
import { startEndpointConsumers, type DeliveryOptions } from './consumers.ts';
import type { EndpointHealthHook } from './endpoint-health.ts';
import { startSweep, type InFlight } from './in-flight.ts';
import { createPullLoops } from './pull-loop.ts';

export { routedBeforeRestore, type SecretOpener, type Sender } from './attempt.ts';
export { RATE_LIMIT_HOLD_MS } from './in-flight.ts';
export type { DeliveryOptions } from './consumers.ts';

export interface Delivery {
  /** Endpoints with a running pull loop in this process. */
  running(): number;
  stop(): Promise<void>;
}

export async function startDelivery(deps: {
  js: JetStreamClient;
  jsm: JetStreamManager;
  directory: EndpointDirectory;
  sender: Sender;
  /** Failed-attempt records go through it rather than js.publish (src/nats/acked-publisher.ts). */
  publisher: AckedPublisher;
  secrets: SecretOpener;
  options: DeliveryOptions;
  log: Logger;
  metrics: ServiceMetrics;
  /** Issue 10: told every attempt's outcome (410 and long failure disable the endpoint); absent in some tests. */
  health?: EndpointHealthHook;
  /** Pulls again when an endpoint's consumer elects a leader (src/nats/consumer-leaders.ts). */
  leaders?: ConsumerLeaders;
}): Promise<Delivery> {
  const { options, log } = deps;
  const maxDeliver = options.retrySchedule.length + 1;
  const inFlight = new Set<InFlight>();
  const stopSweep = startSweep(inFlight, options.retrySchedule[0]!);
  const attempts = createAttempts({
    directory: deps.directory, sender: deps.sender, secrets: deps.secrets, publisher: deps.publisher, health: deps.health,
    inFlight, retrySchedule: options.retrySchedule, log, metrics: deps.metrics,
  });
  const loops = createPullLoops({
    attempt: attempts.attempt, inFlight, maxInFlight: options.maxInFlight, log,
    // The server's wait on the n-th delivery before it redelivers: the backoff step.
    waitFor: (deliveryCount) => options.retrySchedule[Math.min(deliveryCount, maxDeliver - 1) - 1]!,
  });
  const consumers = await startEndpointConsumers({ js: deps.js, jsm: deps.jsm, directory: deps.directory, loops, options, leaders: deps.leaders, log });
  log.info('delivery started', { endpoints: consumers.running() });

  return {
    running: () => consumers.running(),
    async stop() {
      await consumers.stop();
      // In-flight attempts finish (each is bounded by the attempt timeout) so none is cut mid-POST.
      await loops.settle();
      attempts.flushAcks();
      stopSweep();
    },
  };
}
