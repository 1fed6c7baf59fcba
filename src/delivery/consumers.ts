// The endpoints' durable consumers, kept in step with the endpoint directory: an active endpoint gets its
// consumer and a pull loop, a disabled one keeps its consumer and queue but stops pulling (held for a
// restore), a deleted one loses both, and a rate-limit change resizes the consumer's slots.
import type { ConsumerConfig, JetStreamClient, JetStreamManager } from '@nats-io/jetstream';
import { JetStreamApiCodes } from '@nats-io/jetstream';
import { deliveryAddress, deliveryStream, endpointConsumer } from '../../streams/deliveries.ts';
import { ensureConsumer, isApiError } from '../../streams/ensure.ts';
import { EndpointStatus, type EndpointState } from '../domain/endpoint.ts';
import type { EndpointId } from '../domain/ids.ts';
import type { EndpointDirectory } from '../endpoints/directory.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ConsumerLeaders } from '../nats/consumer-leaders.ts';
import type { PullLoop, PullLoops } from './pull-loop.ts';

export interface DeliveryOptions {
  shards: number;
  retrySchedule: number[];
  maxInFlight: number;
  /** HOOKSTREAM_REPLICAS for the endpoints' consumers; absent leaves existing consumers as they are. */
  replicas?: number;
}

export interface EndpointConsumers {
  /** Endpoints with a running pull loop in this process. */
  running(): number;
  /** Stop following the directory and stop every pull loop (attempts already started go on). */
  stop(): Promise<void>;
}

const CONSUMER_SETUP_CONCURRENCY = 32;
const RECONCILE_RETRY_MS = 2000;
const PULL_EXPIRES_MS = 120_000;
const PULL_HEARTBEAT_MS = 30_000;

export async function startEndpointConsumers(deps: {
  js: JetStreamClient;
  jsm: JetStreamManager;
  directory: EndpointDirectory;
  loops: PullLoops;
  options: DeliveryOptions;
  /** Pulls again when an endpoint's consumer elects a leader (a cluster lost a server). */
  leaders?: ConsumerLeaders;
  log: Logger;
}): Promise<EndpointConsumers> {
  const { js, jsm, directory, options, log } = deps;
  const loops = new Map<EndpointId, { loop: PullLoop; untrack: () => void }>();
  let stopping = false;

  async function startLoop(state: EndpointState, known?: ConsumerConfig): Promise<void> {
    if (stopping) return;
    // A running loop is only here when the rate limit changed: the consumer's slots follow it.
    const running = loops.has(state.id);
    const address = deliveryAddress(state.id, options.shards);
    await ensureConsumer(jsm, address.stream, endpointConsumer(state.id, {
      shards: options.shards, retrySchedule: options.retrySchedule, maxInFlight: options.maxInFlight, replicas: options.replicas,
      rateLimit: state.rateLimit,
    }), known);
    if (running || loops.has(state.id) || stopping) return;
    const consumer = await js.consumers.get(address.stream, state.id);
    // Long pulls with the longest heartbeat nats.js allows: with 10,000 endpoints, the default 30 s pull and
    // 15 s heartbeat cost ~1,000 messages/s between client and server while nothing happens (issue 5).
    // A lost pull is noticed after two missed heartbeats (60 s) and re-issued by the client; one lost with
    // its consumer's leader on a cluster is re-issued at the election (src/nats/consumer-leaders.ts).
    const messages = await consumer.consume({ max_messages: options.maxInFlight, expires: PULL_EXPIRES_MS, idle_heartbeat: PULL_HEARTBEAT_MS });
    loops.set(state.id, { loop: deps.loops.run(state.id, messages), untrack: deps.leaders?.track(address.stream, state.id, messages) ?? (() => {}) });
  }

  async function stopLoop(id: EndpointId): Promise<void> {
    const running = loops.get(id);
    if (!running) return;
    loops.delete(id);
    running.untrack();
    await running.loop.stop();
  }

  async function retire(state: EndpointState): Promise<void> {
    await stopLoop(state.id);
    const address = deliveryAddress(state.id, options.shards);
    try {
      await jsm.consumers.delete(address.stream, state.id);
    } catch (e) {
      if (!isApiError(e, JetStreamApiCodes.ConsumerNotFound)) throw e;
    }
    // Pending deliveries of a deleted endpoint are dropped, not kept for a restore. One the router stores
    // after this purge (routed before it saw the delete) is dropped on arrival: routedBeforeRestore.
    await jsm.streams.purge(address.stream, { filter: address.subject });
  }

  const reconcile = (state: EndpointState, known?: ConsumerConfig): Promise<void> =>
    // A disabled endpoint keeps its consumer and queue (held for a restore); a deleted one loses both.
    (state.status === EndpointStatus.Active ? startLoop(state, known) : state.status === EndpointStatus.Disabled ? stopLoop(state.id) : retire(state)).catch((e: unknown) => {
      log.error('could not reconcile endpoint consumer; trying again', { endpoint: state.id, status: state.status, reason: describe(e) });
      // A cluster without a meta leader (a NATS node lost) times out consumer creation for a few seconds:
      // an endpoint left without its consumer would get nothing until the next restart (fault suite).
      const retry = setTimeout(() => {
        const current = directory.get(state.id);
        if (!stopping && current && current.status === state.status) void reconcile(current);
      }, RECONCILE_RETRY_MS);
      retry.unref();
    });

  // Start-up: one listing per stream instead of one info request per endpoint.
  const known = new Map<string, ConsumerConfig>();
  for (let shard = 0; shard < options.shards; shard++) {
    for await (const ci of jsm.consumers.list(deliveryStream(shard))) {
      known.set(ci.name, ci.config);
    }
  }
  const queue = [...directory.all()].filter((s) => s.status === EndpointStatus.Active || known.has(s.id));
  await Promise.all(Array.from({ length: CONSUMER_SETUP_CONCURRENCY }, async () => {
    for (let s = queue.pop(); s; s = queue.pop()) await reconcile(s, known.get(s.id));
  }));

  const pending = new Set<Promise<void>>();
  const unsubscribe = directory.onChange((next, previous) => {
    // url/events/secret changes are read per attempt; a rate limit change resizes the consumer's slots.
    if (previous && previous.status === next.status && previous.rateLimit === next.rateLimit) return;
    const p = reconcile(next);
    pending.add(p);
    void p.finally(() => pending.delete(p));
  });

  return {
    running: () => loops.size,
    async stop() {
      stopping = true;
      unsubscribe();
      await Promise.allSettled([...pending]);
      await Promise.all([...loops.keys()].map(stopLoop));
    },
  };
}
