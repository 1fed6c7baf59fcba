// The delivery role: one durable consumer per active endpoint, each with its own pull loop, so a slow
// or dead endpoint only ever occupies its own lanes. A 2xx acks; a failure is recorded and left unacked,
// and JetStream's backoff brings the next attempt; when the last allowed attempt fails, a plain nak makes
// the server raise the max-deliveries advisory at once (dead letter). A delivery waiting for its retry
// waits at the server (the consumer's max_ack_pending is far above the lanes), never in a lane (issue 17).
// Issue 10: a 429/503 Retry-After pushes the next attempt later (nak with a computed delay), 429s shrink the
// endpoint's concurrency in this process (AIMD), and a rate-limited endpoint keeps each consumer slot for a
// second after its attempt, so the server's max_ack_pending enforces the limit across every instance.
//
// Issue 21: an endpoint with `ordering: key` has a second consumer for its keyed deliveries, whose gate
// lets a delivery through only once no delivery of an earlier event of its key is stored (ordered-gate.ts).
// With direct delivery, an endpoint without ordering has one more, of its tenant's partition stream, whose
// messages are the events themselves (direct-events.ts).
//
// The jobs apart: attempt.ts (one attempt and its message's fate), pull-loop.ts (an endpoint's lanes and
// concurrency), consumers.ts (consumers following endpoint changes), in-flight.ts (held messages),
// waiting-retries.ts and retry-now.ts (bringing waiting retries forward), ordered-gate.ts (keyed order).
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { EndpointDirectory } from '../endpoints/directory.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import type { AckedPublisher } from '../nats/acked-publisher.ts';
import type { ConsumerLeaders } from '../nats/consumer-leaders.ts';
import { createPullFeeds } from '../nats/pull-feed.ts';
import { createAttempts, type BodyOpener, type SecretOpener, type Sender } from './attempt.ts';
import type { DirectEvents } from './direct-events.ts';
import { createProducerClaims } from './producer-claims.ts';
import { createOrderingCutoffs } from './ordering-cutoffs.ts';
import { createDirectCut } from './direct-cut.ts';
import { createEventTimes } from './event-times.ts';
import { createTenantPaces } from './tenant-pace.ts';
import { startDeliveryInstances } from './delivery-instances.ts';
import type { TenantLimits } from '../tenants/limits.ts';
import type { TenantId } from '../domain/ids.ts';
import { startEndpointConsumers, type DeliveryOptions } from './consumers.ts';
import type { EndpointHealthHook } from './endpoint-health.ts';
import { HeldMessages, startSweep } from './in-flight.ts';
import { createRateGates } from './rate-gate.ts';
import { createPullLoops } from './pull-loop.ts';
import { CONNECTIONS_PER_ORIGIN, socketPoolOf } from './http-sender.ts';
import { serveRetryNow } from './retry-now.ts';
import { createWaitingRetries } from './waiting-retries.ts';
import { createStoredAcks } from './stored-acks.ts';
import { createRecentAcks } from './recent-acks.ts';
import { createKeyGate } from './ordered-gate.ts';
import { createNextBySubject } from '../nats/next-by-subject.ts';
import { directGets } from '../../streams/deliveries.ts';
import { createRouterFloor } from './router-floor.ts';
import type { AttemptLogRecorder } from '../deliverylog/recorder.ts';

export { routedBeforeRestore, type SecretOpener, type Sender } from './attempt.ts';
export type { DeliveryOptions } from './consumers.ts';

export interface Delivery {
  /** Endpoints with a running pull loop in this process. */
  running(): number;
  stop(): Promise<void>;
}

/** A pull waits this long at the server; heartbeats every PULL_HEARTBEAT_MS while it waits. */
const PULL_EXPIRES_MS = 120_000;
/**
 * The longest heartbeat nats.js allows: with 10,000 endpoints, 30 s pulls with 15 s heartbeats cost ~1,000
 * messages/s between client and server while nothing happens (issue 5). A lost pull is noticed after two
 * missed heartbeats; one lost with its consumer's leader on a cluster is renewed at the election.
 */
const PULL_HEARTBEAT_MS = 30_000;
const GAUGE_EVERY_MS = 500;
/** A read of a key's head unanswered this long is retried by the gate's backoff. */
const HEAD_READ_TIMEOUT_MS = 5000;
/** Gauge ticks between sweeps of expired signing keys (about a minute). */
const KEY_SWEEP_TICKS = 120;

export async function startDelivery(deps: {
  nc: NatsConnection;
  jsm: JetStreamManager;
  /** Pull requests' reply subjects start with it (the service's inbox prefix, which nats.conf lets it read). */
  inboxPrefix: string;
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
  /** The operators' delivery log (src/deliverylog/recorder.ts). */
  attemptLog?: AttemptLogRecorder;
  /** Opens sealed delivery bodies (src/erasure/data-keys.ts); absent: bodies are sent as stored. */
  bodies?: BodyOpener;
  /** Direct delivery (with `options.direct`): what the partition streams' copies of events become. */
  directEvents?: DirectEvents;
  /** The tenants' limits (direct delivery paces each tenant's endpoints at its `events_per_second`); absent: the defaults. */
  tenantLimits?: { current(tenant: TenantId): TenantLimits };
}): Promise<Delivery> {
  const { options, log } = deps;
  const maxDeliver = options.retrySchedule.length + 1;
  const inFlight = new HeldMessages();
  const stopSweep = startSweep(inFlight, options.retrySchedule[0]!);
  const retries = createWaitingRetries(deps.nc);
  const stopRetryNow = serveRetryNow(deps.nc, retries, log);
  const rates = createRateGates({ jsm: deps.jsm, publisher: deps.publisher, replicas: options.replicas, log });
  const recentAcks = createRecentAcks();
  const stored = createStoredAcks({ publisher: deps.publisher, log });
  // Issue 21: the ordering gates' reads of a key's stored deliveries, and of the router's late marks.
  const heads = createNextBySubject(deps.nc, { timeoutMs: HEAD_READ_TIMEOUT_MS, inboxPrefix: deps.inboxPrefix });
  // Their reads of the delivery streams: direct gets where those streams allow them.
  const keyHeads = directGets(options.replicas) ? createNextBySubject(deps.nc, { timeoutMs: HEAD_READ_TIMEOUT_MS, inboxPrefix: deps.inboxPrefix, direct: true }) : heads;
  // Their barrier: one reader of the router's progress for every gate of the process.
  const floor = createRouterFloor({ jsm: deps.jsm, log, heads });
  // Direct delivery: when EVENTS stored an event, which its copies' cuts compare (an ordering switch, the switch-off).
  const eventTime = deps.directEvents && createEventTimes({ jsm: deps.jsm });
  const attempts = createAttempts({
    directory: deps.directory, sender: deps.sender, secrets: deps.secrets, publisher: deps.publisher, health: deps.health,
    inFlight, retries, rates, retrySchedule: options.retrySchedule, log, metrics: deps.metrics,
    stored, recentAcks, attemptLog: deps.attemptLog, bodies: deps.bodies, direct: deps.directEvents,
    claims: deps.directEvents && createProducerClaims({ publisher: deps.publisher, reads: heads, log }),
    cutoffs: eventTime && createOrderingCutoffs({ jsm: deps.jsm, eventTime }),
    cut: eventTime && options.direct && createDirectCut({ window: options.direct.window, eventTime }),
  });
  // Direct delivery: a tenant's events_per_second is shared by the instances pulling its endpoints' consumers.
  const instances = deps.directEvents ? startDeliveryInstances({ nc: deps.nc, log }) : undefined;
  const feeds = createPullFeeds(deps.nc, { expiresMs: PULL_EXPIRES_MS, heartbeatMs: PULL_HEARTBEAT_MS, inboxPrefix: deps.inboxPrefix, log });
  const loops = createPullLoops({
    feeds, attempt: attempts.attempt, inFlight, retries, maxInFlight: options.maxInFlight, recentAcks, log,
    tenantOf: (id) => deps.directory.get(id)?.tenant,
    poolOf: (id) => { const e = deps.directory.get(id); return e && socketPoolOf(e.tenant, e.url); },
    socketsPerPool: CONNECTIONS_PER_ORIGIN,
    // The server's wait on the n-th delivery before it redelivers: the backoff step.
    waitFor: (deliveryCount) => options.retrySchedule[Math.min(deliveryCount, maxDeliver - 1) - 1]!,
  });
  const consumers = await startEndpointConsumers({
    jsm: deps.jsm, directory: deps.directory, loops, options, leaders: deps.leaders, log,
    onRetired: (id) => { retries.forget(id); attempts.forget(id); rates.forget(id); },
    gateFor: (id, stream) => createKeyGate({ heads: keyHeads, stream, floor, recentAcks, inFlight, endpoint: id, log }),
    ...(instances ? { paceFor: createTenantPaces({ limits: deps.tenantLimits, instances: instances.count, hits: { inc: () => deps.metrics.tenantLimitHits.inc({ limit: 'events_per_second' }) } }).of } : {}),
  });
  // Sampled rather than kept exact on the hot path: held deliveries are bounded by the lanes (issue 17).
  let ticks = 0;
  const gauges = setInterval(() => {
    deps.metrics.messagesHeld.set(loops.held());
    deps.metrics.messagesParked.set(loops.parked());
    deps.metrics.endpointsProbing.set(loops.probing());
    // About once a minute: opened signing keys leave memory once their secret's grace is over.
    if (++ticks % KEY_SWEEP_TICKS === 0) attempts.forgetExpiredKeys(Date.now());
  }, GAUGE_EVERY_MS);
  gauges.unref();
  log.info('delivery started', { endpoints: consumers.running() });

  return {
    running: () => consumers.running(),
    async stop() {
      clearInterval(gauges);
      instances?.stop();
      stopRetryNow();
      await consumers.stop();
      feeds.stop();
      // In-flight attempts finish (each is bounded by the attempt timeout) so none is cut mid-POST; those
      // still waiting for a connection are handed back unsent.
      deps.sender.stopWaiting?.();
      await loops.settle();
      stored.flush();
      deps.attemptLog?.flush();
      heads.close();
      if (keyHeads !== heads) keyHeads.close();
      floor.close();
      stopSweep();
    },
  };
}
