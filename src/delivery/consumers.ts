// The endpoints' durable consumers, kept in step with the endpoint directory: an active endpoint gets its
// consumer and a pull loop, a disabled one keeps its consumer and queue but stops pulling (held for a
// restore), a deleted one loses both.
//
// One reconcile at a time per endpoint, each acting on the endpoint as the directory has it when it runs
// (never on the change that queued it), and the directory is followed from before the start-up snapshot,
// so no change made during start-up is missed (issue 17).
import type { ConsumerConfig, JetStreamManager } from '@nats-io/jetstream';
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
  /** HOOKSTREAM_MAX_QUEUED: the consumer's room for deliveries waiting for a retry. */
  maxQueued: number;
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

export async function startEndpointConsumers(deps: {
  jsm: JetStreamManager;
  directory: EndpointDirectory;
  loops: PullLoops;
  options: DeliveryOptions;
  /** Pulls again when an endpoint's consumer elects a leader (a cluster lost a server). */
  leaders?: ConsumerLeaders;
  /** An endpoint was deleted: drop what the delivery role keeps for it. */
  onRetired?: (id: EndpointId) => void;
  log: Logger;
}): Promise<EndpointConsumers> {
  const { jsm, directory, options, log } = deps;
  const loops = new Map<EndpointId, { loop: PullLoop; untrack: () => void }>();
  let stopping = false;

  async function ensure(state: EndpointState, known?: ConsumerConfig): Promise<void> {
    const address = deliveryAddress(state.id, options.shards);
    await ensureConsumer(jsm, address.stream, endpointConsumer(state.id, {
      shards: options.shards, retrySchedule: options.retrySchedule, maxQueued: options.maxQueued, replicas: options.replicas,
    }), known);
  }

  function startLoop(state: EndpointState): void {
    const address = deliveryAddress(state.id, options.shards);
    const loop = deps.loops.run(state.id, { stream: address.stream, consumer: state.id });
    const untrack = deps.leaders?.follow(address.stream, state.id, loop.repull) ?? (() => {});
    loops.set(state.id, { loop, untrack });
  }

  function stopLoop(id: EndpointId): void {
    const running = loops.get(id);
    if (!running) return;
    loops.delete(id);
    running.untrack();
    running.loop.stop();
  }

  async function retire(id: EndpointId): Promise<void> {
    stopLoop(id);
    const address = deliveryAddress(id, options.shards);
    try {
      await jsm.consumers.delete(address.stream, id);
    } catch (e) {
      if (!isApiError(e, JetStreamApiCodes.ConsumerNotFound)) throw e;
    }
    // Pending deliveries of a deleted endpoint are dropped, not kept for a restore; but only while it is
    // still deleted: a delete seen late must not purge a restored endpoint's new deliveries. The sync
    // makes this instance's view as new as the stream's before that destructive step.
    await directory.sync();
    if (directory.get(id)?.status !== EndpointStatus.Deleted) return;
    deps.onRetired?.(id);
    // One the router stores after this purge (routed before it saw the delete) is dropped on arrival: routedBeforeRestore.
    await jsm.streams.purge(address.stream, { filter: address.subject });
  }

  /** Bring the endpoint's consumer and loop in line with the directory as it is now. */
  async function apply(id: EndpointId, known?: ConsumerConfig): Promise<void> {
    if (stopping) return;
    const state = directory.get(id);
    if (!state || state.status === EndpointStatus.Deleted) {
      if (state || loops.has(id) || known) await retire(id);
      return;
    }
    if (state.status === EndpointStatus.Disabled) {
      // A disabled endpoint keeps its consumer and queue (held for a restore).
      stopLoop(id);
      return;
    }
    if (loops.has(id)) return;
    await ensure(state, known);
    // The directory may have moved on during the await: the next reconcile of this endpoint is queued.
    if (stopping || loops.has(id) || directory.get(id)?.status !== EndpointStatus.Active) return;
    startLoop(state);
  }

  // One chain per endpoint: a reconcile starts when the previous one of the same endpoint has ended.
  const chains = new Map<EndpointId, Promise<void>>();
  const reconcile = (id: EndpointId, known?: ConsumerConfig): Promise<void> => {
    const next = (chains.get(id) ?? Promise.resolve()).then(() => apply(id, known)).catch((e: unknown) => {
      log.error('could not reconcile endpoint consumer; trying again', { endpoint: id, status: directory.get(id)?.status, reason: describe(e) });
      // A cluster without a meta leader (a NATS node lost) times out consumer creation for a few seconds:
      // an endpoint left without its consumer would get nothing until the next restart (fault suite).
      const retry = setTimeout(() => { if (!stopping) void reconcile(id); }, RECONCILE_RETRY_MS);
      retry.unref();
    });
    chains.set(id, next);
    void next.finally(() => { if (chains.get(id) === next) chains.delete(id); });
    return next;
  };

  // Followed before the snapshot below is read, so a change during start-up is reconciled too (twice at
  // worst, which is harmless: each reconcile acts on the current state).
  const unsubscribe = directory.onChange((next, previous) => {
    // url/events/secret/rate limit changes are read per attempt.
    if (previous && previous.status === next.status) return;
    void reconcile(next.id);
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
    for (let s = queue.pop(); s; s = queue.pop()) await reconcile(s.id, known.get(s.id));
  }));

  return {
    running: () => loops.size,
    async stop() {
      stopping = true;
      unsubscribe();
      await Promise.allSettled([...chains.values()]);
      for (const id of [...loops.keys()]) stopLoop(id);
    },
  };
}
