// The endpoints' durable consumers, kept in step with the endpoint directory: an active endpoint gets its
// consumer and a pull loop, a disabled one keeps its consumer and queue but stops pulling (held for a
// restore), a deleted one loses both.
//
// With direct delivery (streams/direct.ts) an endpoint without ordering also has a consumer of its
// tenant's partition stream, which brings its events; its delivery-stream consumer still brings replays,
// test events and what was queued before. An endpoint made ordered keeps its direct consumer until that
// holds nothing, as a keyed consumer is kept (below).
//
// One reconcile at a time per endpoint, each acting on the endpoint as the directory has it when it runs
// (never on the change that queued it), and the directory is followed from before the start-up snapshot,
// so no change made during start-up is missed (issue 17).
import type { ConsumerConfig, JetStreamManager } from '@nats-io/jetstream';
import { JetStreamApiCodes } from '@nats-io/jetstream';
import { deliveryAddress, deliveryStream, endpointConsumer, keyedConsumerName, keyedSubjects, consumerEndpoint } from '../../streams/deliveries.ts';
import { ensureConsumer, isApiError, listConsumers } from '../../streams/ensure.ts';
import { DIRECT_START_SLACK_MS, directAddress, directFilters, directStart, ensureDirectConsumer } from '../../streams/direct.ts';
import { partitionStream } from '../../streams/events.ts';
import { EndpointStatus, Ordering, type EndpointState } from '../domain/endpoint.ts';
import type { EndpointId } from '../domain/ids.ts';
import type { EndpointDirectory } from '../endpoints/directory.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ConsumerLeaders } from '../nats/consumer-leaders.ts';
import type { PullLoop, PullLoops } from './pull-loop.ts';
import type { Pace } from './tenant-pace.ts';
import type { DirectWindow } from './direct-window.ts';
import type { KeyGate } from './ordered-gate.ts';

export interface DeliveryOptions {
  shards: number;
  retrySchedule: number[];
  maxInFlight: number;
  /** HOOKSTREAM_MAX_QUEUED: the consumer's room for deliveries waiting for a retry. */
  maxQueued: number;
  /** HOOKSTREAM_REPLICAS for the endpoints' consumers; absent leaves existing consumers as they are. */
  replicas?: number;
  /**
   * Direct delivery: HOOKSTREAM_EVENT_PARTITIONS, when it started (EVENTS' metadata, streams/events.ts),
   * and its window as this process knows it (src/delivery/direct-window.ts): once it is turned off, no
   * direct consumer is made and each is deleted once drained past the switch-off.
   */
  direct?: { partitions: number; since: number; window: DirectWindow };
}

export interface EndpointConsumers {
  /** Endpoints with a running pull loop in this process. */
  running(): number;
  /** Stop following the directory and stop every pull loop (attempts already started go on). */
  stop(): Promise<void>;
}

const CONSUMER_SETUP_CONCURRENCY = 32;
const RECONCILE_RETRY_MS = 2000;
/**
 * Issue 21: an endpoint switched back to `ordering: none` keeps its keyed consumer until it holds nothing,
 * looked at this often, and at the earliest this long after the switch (a router may still route by the
 * old setting for a moment, and a delivery stored on a key's subject without a consumer would stay there).
 */
const DRAIN_CHECK_MS = 5000;
const DRAIN_GRACE_MS = 60_000;

export async function startEndpointConsumers(deps: {
  jsm: JetStreamManager;
  directory: EndpointDirectory;
  loops: PullLoops;
  options: DeliveryOptions;
  /** Pulls again when an endpoint's consumer elects a leader (a cluster lost a server). */
  leaders?: ConsumerLeaders;
  /** An endpoint was deleted: drop what the delivery role keeps for it. */
  onRetired?: (id: EndpointId) => void;
  /** Issue 21: the gate of an ordered endpoint's keyed consumer. */
  gateFor: (id: EndpointId, stream: string) => KeyGate;
  /** Direct delivery: the pace of an endpoint's direct consumer, its tenant's `events_per_second`. */
  paceFor?: (tenant: string) => Pace;
  log: Logger;
}): Promise<EndpointConsumers> {
  const { jsm, directory, options, log } = deps;
  type Running = { loop: PullLoop; untrack: () => void };
  const loops = new Map<EndpointId, Running>();
  // Issue 21: the keyed consumers' loops, and the keyed consumers known to exist (they outlive `ordering: key` until drained).
  const keyedLoops = new Map<EndpointId, Running>();
  const keyedExists = new Set<EndpointId>();
  // Direct delivery: the direct consumers' loops, and the direct consumers known to exist.
  const directLoops = new Map<EndpointId, Running>();
  const directExists = new Set<EndpointId>();
  const knownDirect = new Map<string, ConsumerConfig>();
  // Direct consumers to be made when direct delivery, turned on again, starts.
  const startingLater = new Set<EndpointId>();
  // The filter subjects (joined) each direct consumer was last set to.
  const directFiltered = new Map<EndpointId, string>();
  // Start-up's listing of keyed consumers (cleared once start-up reconciled them).
  const knownKeyed = new Map<string, ConsumerConfig>();
  let stopping = false;

  async function ensure(state: EndpointState, known?: ConsumerConfig, keyed = false): Promise<void> {
    const address = deliveryAddress(state.id, options.shards);
    await ensureConsumer(jsm, address.stream, endpointConsumer(state.id, {
      shards: options.shards, retrySchedule: options.retrySchedule, maxQueued: options.maxQueued, replicas: options.replicas, keyed,
    }), known);
    if (keyed) keyedExists.add(state.id);
  }

  function startLoop(state: EndpointState, keyed = false): void {
    const address = deliveryAddress(state.id, options.shards);
    const consumer = keyed ? keyedConsumerName(state.id) : state.id;
    const loop = deps.loops.run(state.id, { stream: address.stream, consumer }, keyed ? deps.gateFor(state.id, address.stream) : undefined);
    const untrack = deps.leaders?.follow(address.stream, consumer, loop.repull) ?? (() => {});
    (keyed ? keyedLoops : loops).set(state.id, { loop, untrack });
  }

  function startDirectLoop(state: EndpointState, partitions: number): void {
    const address = directAddress(state, partitions);
    const loop = deps.loops.run(state.id, address, undefined, deps.paceFor?.(state.tenant));
    const untrack = deps.leaders?.follow(address.stream, address.consumer, loop.repull) ?? (() => {});
    directLoops.set(state.id, { loop, untrack });
  }

  function stopLoop(id: EndpointId): void {
    for (const map of [loops, keyedLoops, directLoops]) {
      const running = map.get(id);
      if (!running) continue;
      map.delete(id);
      running.untrack();
      running.loop.stop();
    }
  }

  async function deleteConsumer(stream: string, name: string): Promise<void> {
    try {
      await jsm.consumers.delete(stream, name);
    } catch (e) {
      if (!isApiError(e, JetStreamApiCodes.ConsumerNotFound)) throw e;
    }
  }

  async function retire(id: EndpointId): Promise<void> {
    stopLoop(id);
    const address = deliveryAddress(id, options.shards);
    await deleteConsumer(address.stream, id);
    await deleteConsumer(address.stream, keyedConsumerName(id));
    keyedExists.delete(id);
    if (options.direct) {
      // Its tenant's partition; every partition for an endpoint the directory no longer knows.
      const tenant = directory.get(id)?.tenant;
      const streams = tenant !== undefined ? [directAddress({ id, tenant }, options.direct.partitions).stream]
        : Array.from({ length: options.direct.partitions }, (_, p) => partitionStream(p));
      for (const stream of streams) await deleteConsumer(stream, id);
      directExists.delete(id);
      directFiltered.delete(id);
    }
    // Pending deliveries of a deleted endpoint are dropped, not kept for a restore; but only while it is
    // still deleted: a delete seen late must not purge a restored endpoint's new deliveries. The sync
    // makes this instance's view as new as the stream's before that destructive step.
    await directory.sync();
    if (directory.get(id)?.status !== EndpointStatus.Deleted) return;
    deps.onRetired?.(id);
    // One the router stores after this purge (routed before it saw the delete) is dropped on arrival: routedBeforeRestore.
    await jsm.streams.purge(address.stream, { filter: address.subject });
    await jsm.streams.purge(address.stream, { filter: keyedSubjects(id, options.shards) });
  }

  /** Direct delivery's switch-off time, once this process knows it was written (streams/events.ts). */
  const directUntil = (): number | undefined => options.direct?.window.current()?.directUntil;

  /**
   * An endpoint's second consumer it no longer needs is deleted once it holds nothing (pending or
   * ack-pending); until then its loop delivers what it holds, in order. Issue 21: the keyed consumer of an
   * endpoint whose ordering is `none` again; direct delivery: the direct consumer of one now ordered (the
   * routers queue its deliveries again), and every direct consumer once direct delivery is turned off
   * (the routers queue every event stored from `until` on; its copies of those are acked unsent).
   */
  const unneeded = (state: EndpointState | undefined, which: 'keyed' | 'direct'): state is EndpointState =>
    state?.status === EndpointStatus.Active && ((state.ordering === Ordering.Key) === (which === 'direct') || (which === 'direct' && turnedOffLongAgo()));
  /**
   * Direct delivery turned off, and `until` past by the grace: no copy of an event stored before it is
   * still on its way into a partition stream (looked at no sooner: one consumer info per endpoint a check).
   */
  const turnedOffLongAgo = (): boolean => {
    const until = directUntil();
    return until !== undefined && Date.now() - until > DRAIN_GRACE_MS;
  };
  /** Past its switch by the grace: nothing from before it is still on its way to the consumer. */
  const settled = (state: EndpointState, which: 'keyed' | 'direct'): boolean =>
    (which === 'direct' && turnedOffLongAgo()) || Date.now() - Date.parse(state.updatedAt) > DRAIN_GRACE_MS;
  async function drain(id: EndpointId, which: 'keyed' | 'direct'): Promise<void> {
    // Read when its turn in the endpoint's chain comes: a reconcile before it may have changed it back.
    const state = directory.get(id);
    if (stopping || !unneeded(state, which)) return;
    const address = which === 'keyed'
      ? { stream: deliveryAddress(state.id, options.shards).stream, consumer: keyedConsumerName(state.id) }
      : directAddress(state, options.direct!.partitions);
    const ci = await jsm.consumers.info(address.stream, address.consumer).catch((e: unknown) => {
      if (isApiError(e, JetStreamApiCodes.ConsumerNotFound)) return null;
      throw e;
    });
    if (ci && !(settled(state, which) && ci.num_pending === 0 && ci.num_ack_pending === 0)) return;
    const [loops, exists] = which === 'keyed' ? [keyedLoops, keyedExists] : [directLoops, directExists];
    const running = loops.get(state.id);
    loops.delete(state.id);
    running?.untrack();
    running?.loop.stop();
    if (ci) await deleteConsumer(address.stream, address.consumer);
    exists.delete(state.id);
    if (which === 'direct') directFiltered.delete(state.id);
    const why = which === 'keyed' ? 'of an endpoint no longer ordered' : state.ordering === Ordering.Key ? 'of an endpoint now ordered' : 'of direct delivery turned off';
    log.info(`${which} consumer ${why} deleted: it held nothing`, { endpoint: state.id });
  }

  /**
   * Where a new direct consumer starts; undefined: none is made, direct delivery being turned off (the
   * routers queue whatever it would have read, or already did, once this time has passed).
   */
  async function directFrom(state: EndpointState, direct: NonNullable<DeliveryOptions['direct']>): Promise<number | undefined> {
    const window = direct.window.current();
    const start = await directStart(jsm, state, window?.directSince ?? direct.since);
    const until = window?.directUntil;
    return until !== undefined && (Date.now() >= until || start >= until) ? undefined : start;
  }

  /** Its direct consumer's filter is narrowed only once the endpoint is unchanged for a while (streams/direct.ts, nextFilters). */
  const mayNarrow = (state: EndpointState): boolean => Date.now() - Date.parse(state.updatedAt) > DRAIN_GRACE_MS;
  /** The filter an endpoint's direct consumer is to have, as its consumer's `filter_subjects` joined. */
  const wantedFilters = (state: EndpointState, partitions: number) => directFilters(state.tenant, partitions, state.events).join();

  /** Direct delivery: an active endpoint's direct consumer and loop (one without ordering, or one being drained). */
  async function applyDirect(state: EndpointState): Promise<void> {
    const direct = options.direct;
    if (!direct || (directLoops.has(state.id) && directFiltered.get(state.id) === wantedFilters(state, direct.partitions))) return;
    if (state.ordering === Ordering.Key && !directExists.has(state.id)) return;
    // Turned on again, direct delivery starts ahead (streams/events.ts): a consumer made now would start
    // at once (nats-server resolves a start time still to come to the stream's next message), so it is
    // made when its start comes.
    const startsIn = (direct.window.current()?.directSince ?? direct.since) - DIRECT_START_SLACK_MS - Date.now();
    if (startsIn > 0 && !directExists.has(state.id)) {
      if (startingLater.has(state.id)) return;
      startingLater.add(state.id);
      const later = setTimeout(() => { startingLater.delete(state.id); if (!stopping) void reconcile(state.id); }, startsIn + 100);
      later.unref();
      return;
    }
    const set = await ensureDirectConsumer(jsm, state, direct.partitions, { ...options, narrow: mayNarrow(state) }, () => directFrom(state, direct), knownDirect.get(state.id));
    if (!set) return;
    directExists.add(state.id);
    directFiltered.set(state.id, set.filters.join());
    // A pull waiting at the server is not woken by a message of a subject its filter has just taken.
    if (set.widened) directLoops.get(state.id)?.loop.repull();
    // Made from a view that a PATCH stored since may have outdated, when no API widened it first (it had
    // no consumer yet): a consumer reads nothing until pulled, so that PATCH is reconciled (queued by the
    // directory's change) before the first pull.
    if (set.created) {
      await directory.sync();
      if (directory.get(state.id)?.events.join() !== state.events.join()) return;
    }
    if (stopping || directLoops.has(state.id) || directory.get(state.id)?.status !== EndpointStatus.Active) return;
    startDirectLoop(state, direct.partitions);
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
    if (!loops.has(id)) {
      await ensure(state, known);
      // The directory may have moved on during the await: the next reconcile of this endpoint is queued.
      if (stopping || loops.has(id) || directory.get(id)?.status !== EndpointStatus.Active) return;
      startLoop(state);
    }
    await applyDirect(state);
    const ordered = state.ordering === Ordering.Key;
    if (!ordered && !keyedExists.has(id)) return;
    if (!keyedLoops.has(id)) {
      if (ordered) await ensure(state, knownKeyed.get(id), true);
      if (stopping || keyedLoops.has(id) || directory.get(id)?.status !== EndpointStatus.Active) return;
      startLoop(state, true);
    }
  }

  // One chain per endpoint: a reconcile starts when the previous one of the same endpoint has ended.
  const chains = new Map<EndpointId, Promise<void>>();
  const chained = (id: EndpointId, work: () => Promise<void>, onError: (e: unknown) => void): Promise<void> => {
    const next = (chains.get(id) ?? Promise.resolve()).then(work).catch(onError);
    chains.set(id, next);
    void next.finally(() => { if (chains.get(id) === next) chains.delete(id); });
    return next;
  };
  const reconcile = (id: EndpointId, known?: ConsumerConfig): Promise<void> => chained(id, () => apply(id, known), (e) => {
    log.error('could not reconcile endpoint consumer; trying again', { endpoint: id, status: directory.get(id)?.status, reason: describe(e) });
    // A cluster without a meta leader (a NATS node lost) times out consumer creation for a few seconds:
    // an endpoint left without its consumer would get nothing until the next restart (fault suite).
    const retry = setTimeout(() => { if (!stopping) void reconcile(id); }, RECONCILE_RETRY_MS);
    retry.unref();
  });

  // Followed before the snapshot below is read, so a change during start-up is reconciled too (twice at
  // worst, which is harmless: each reconcile acts on the current state).
  const unsubscribe = directory.onChange((next, previous) => {
    // url/events/secret/rate limit changes are read per attempt; with direct delivery, `events` is the
    // direct consumer's filter.
    const sameEvents = !options.direct || previous?.events.join() === next.events.join();
    if (previous && previous.status === next.status && previous.ordering === next.ordering && sameEvents) return;
    void reconcile(next.id);
  });

  // Start-up: one listing per stream instead of one info request per endpoint.
  const known = new Map<string, ConsumerConfig>();
  for (let shard = 0; shard < options.shards; shard++) {
    for await (const ci of listConsumers(jsm, deliveryStream(shard))) {
      const { endpoint, keyed } = consumerEndpoint(ci.name);
      (keyed ? knownKeyed : known).set(endpoint, ci.config);
      if (keyed) keyedExists.add(endpoint as EndpointId);
    }
  }
  for (let p = 0; p < (options.direct?.partitions ?? 0); p++) {
    for await (const ci of listConsumers(jsm, partitionStream(p))) {
      knownDirect.set(ci.name, ci.config);
      directExists.add(ci.name as EndpointId);
    }
  }
  const queue = [...directory.all()].filter((s) => s.status === EndpointStatus.Active || known.has(s.id) || knownKeyed.has(s.id) || knownDirect.has(s.id));
  await Promise.all(Array.from({ length: CONSUMER_SETUP_CONCURRENCY }, async () => {
    for (let s = queue.pop(); s; s = queue.pop()) await reconcile(s.id, known.get(s.id));
  }));
  knownKeyed.clear();
  knownDirect.clear();

  // Keyed consumers of endpoints no longer ordered, and direct ones of endpoints now ordered, deleted once
  // drained (in the endpoint's reconcile chain).
  const drains = setInterval(() => {
    for (const [which, running] of [['keyed', keyedLoops], ['direct', directLoops]] as const) {
      for (const id of running.keys()) {
        if (!unneeded(directory.get(id), which)) continue;
        void chained(id, () => drain(id, which), (e) => log.warn(`could not look at a ${which} consumer to drain; trying again`, { endpoint: id, reason: describe(e) }));
      }
    }
    // A direct consumer's filter wider than its endpoint takes, narrowed once the endpoint has settled.
    for (const id of directLoops.keys()) {
      const state = directory.get(id);
      if (state && options.direct && mayNarrow(state) && directFiltered.get(id) !== wantedFilters(state, options.direct.partitions)) void reconcile(id);
    }
  }, DRAIN_CHECK_MS);
  drains.unref();

  return {
    running: () => loops.size,
    async stop() {
      stopping = true;
      clearInterval(drains);
      unsubscribe();
      await Promise.allSettled([...chains.values()]);
      for (const id of [...loops.keys(), ...keyedLoops.keys(), ...directLoops.keys()]) stopLoop(id);
    },
  };
}
