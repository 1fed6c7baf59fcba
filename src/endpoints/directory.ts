// A live, in-memory view of every endpoint, folded from the ENDPOINTS stream by an ordered consumer.
// The router and the delivery role learn endpoint changes from it as they happen, never by polling
// Postgres. `sync()` gives causal consistency: it returns once every endpoint event stored before
// the call has been applied.
//
// The stream is the source of truth, also when events are removed from it (a purge, a deleted message):
// a sequence that is no longer stored is never delivered, so waits end once nothing stored is left
// below their target, every wait is bounded, and a directory that had applied an event the stream no
// longer holds folds the stream again from what is left (issue 8, point 6).
//
// Start-up does not grow with the length of the history (issue 23): a directory starts from the latest
// snapshot of a view (snapshot.ts) and folds only the events after it; directories write a new one every
// 10,000 events. A snapshot is checked like the events it stands for, and the view it gives is proved
// against the stream like any other: a removal since it folds the stream from the start.
import { DeliverPolicy, JetStreamApiCodes, type JetStreamClient, type JetStreamManager, type ConsumerMessages, type StreamState } from '@nats-io/jetstream';
import { ENDPOINTS_STREAM } from '../../streams/endpoints.ts';
import { EndpointStatus, type EndpointState } from '../domain/endpoint.ts';
import type { EndpointId, TenantId } from '../domain/ids.ts';
import type { Logger } from '../log.ts';
import type { Counter, Gauge } from '../metrics.ts';
import { isApiError } from '../../streams/ensure.ts';
import { foldEndpointMessage, type EndpointMessage } from './fold.ts';
import { latestSnapshotSeq, readSnapshot, UnusableSnapshotError, writeSnapshot, type DirectorySnapshot } from './snapshot.ts';
import { describe } from '../errors.ts';

export type EndpointChange = (next: EndpointState, previous: EndpointState | undefined) => void;

export interface EndpointDirectory {
  get(id: EndpointId): EndpointState | undefined;
  /** Endpoints of a tenant that take new deliveries: active ones, and disabled ones (held until a restore). */
  activeFor(tenant: TenantId): Iterable<EndpointState>;
  all(): Iterable<EndpointState>;
  /**
   * Called for every change. After a rebuild, an endpoint the stream no longer holds is reported once
   * as deleted (and `get` no longer knows it).
   */
  onChange(listener: EndpointChange): () => void;
  /**
   * Resolves once every endpoint event stored before this call is applied (events removed from the
   * stream meanwhile are skipped, and logged). Rejects when the consumer makes no progress for
   * `stallMs` while events remain, or when the directory stops. Concurrent calls share one request.
   */
  sync(): Promise<void>;
  /**
   * True when the consumer itself said more events were stored than it had delivered (the `pending` of
   * the last message applied): the view is known to be behind, without asking the server. False says
   * only that nothing known is missing; `sync()` is what proves it.
   */
  behind(): boolean;
  lastSeq(): number;
  /** Seconds since a sync last proved the view complete, while it is not known to be (0 when it is). */
  lagSeconds(): number;
  /** The view as it is now, at the sequence it reached (what a snapshot stores). */
  snapshot(): DirectorySnapshot;
  stop(): Promise<void>;
}

export interface DirectoryOptions {
  /** How long a sync may see no progress while stored events remain before it rejects (default 10 s). */
  stallMs?: number;
  /** How long a sync waits for progress before it asks the stream what is still stored (default 250 ms). */
  probeMs?: number;
  /**
   * How often the directory syncs by itself (default 10 s), so a fold whose consumer ended is replaced
   * even in a process where nothing else calls sync (a delivery-only instance).
   */
  healMs?: number;
  /**
   * Write a snapshot of the view (ENDPOINT_SNAPSHOTS) once it is this many events past the latest one, so
   * that a starting instance folds only what came after (default 10,000; 0: never). Every directory
   * starts from the latest usable snapshot whatever this says.
   */
  snapshotEvery?: number;
}

/** One fold of the stream by one ordered consumer; a rebuild starts a new one and swaps it in when caught up. */
interface Fold {
  byId: Map<EndpointId, EndpointState>;
  activeByTenant: Map<TenantId, Map<EndpointId, EndpointState>>;
  /** Stream sequence the fold has reached (applied, or skipped because it is no longer stored). */
  applied: number;
  /** Messages applied: compared with the stream's message count to notice removed events. */
  count: number;
  /**
   * Messages of each endpoint in `count`, since its last compaction: what the purge after a compaction
   * removes of them is taken off `count`, so a compaction is not mistaken for a removal.
   */
  seen: Map<EndpointId, number>;
  /** Messages the server still held for the consumer when it delivered the last one applied. */
  pending: number;
  progress: Set<() => void>;
  messages: ConsumerMessages;
  done: Promise<void>;
  /** Its consumer stopped delivering for good (deleted under it, or failed): the next sync folds anew. */
  ended: boolean;
}

/** A fold made no progress while events it had not applied were stored (its consumer is gone or stuck). */
class DirectoryStallError extends Error {
  override readonly name = 'DirectoryStallError';
}

export async function startEndpointDirectory(deps: {
  js: JetStreamClient;
  jsm: JetStreamManager;
  log: Logger;
  options?: DirectoryOptions;
  /** `hookstream_directory_lag_seconds`, set at every sync. */
  lag?: Gauge;
  /** `hookstream_directory_events_skipped_total`: events the fold skips. */
  skipped?: Counter;
}): Promise<EndpointDirectory> {
  const stallMs = deps.options?.stallMs ?? 10_000;
  const healMs = deps.options?.healMs ?? 10_000;
  const probeMs = deps.options?.probeMs ?? 250;
  const listeners = new Set<EndpointChange>();
  const folds = new Set<Fold>();
  let stopped = false;
  const stoppedError = () => new Error('endpoint directory stopped');
  // Every wait also ends when the directory stops, so stop() never waits behind a sync.
  const onStop = new Set<(e: Error) => void>();
  const orStop = <T>(p: Promise<T>): Promise<T> => {
    if (stopped) return Promise.reject(stoppedError());
    let cancel: (e: Error) => void = () => {};
    const stopping = new Promise<never>((_, reject) => { cancel = reject; onStop.add(reject); });
    return Promise.race([p, stopping]).finally(() => onStop.delete(cancel));
  };
  // The fold in use, assigned once the first fold exists (declared here, so apply() may compare with it before).
  let current: Fold;

  const notify = (next: EndpointState, previous: EndpointState | undefined) => {
    for (const l of listeners) {
      try { l(next, previous); } catch (e) { deps.log.error('endpoint change listener failed', { endpoint: next.id, reason: describe(e) }); }
    }
  };

  const index = (fold: Fold, state: EndpointState) => {
    fold.byId.set(state.id, state);
    let tenantMap = fold.activeByTenant.get(state.tenant);
    if (!tenantMap) fold.activeByTenant.set(state.tenant, (tenantMap = new Map()));
    // A disabled endpoint is still routed to: its deliveries wait in its queue for a restore (issue 10).
    if (state.status !== EndpointStatus.Deleted) tenantMap.set(state.id, state);
    else tenantMap.delete(state.id);
  };

  /** Applies `m`; returns how many of the messages `count` holds its compaction's purge takes (0 for any other). */
  const apply = (fold: Fold, m: EndpointMessage): number => {
    const step = foldEndpointMessage(m, (id) => fold.byId.get(id));
    const of = step.ok ? step.event.id : step.endpoint;
    let removes = 0;
    if (step.ok && step.event.type === 'endpoint.compacted') {
      // Only what this fold counted: events purged before it read them were never in `count`.
      removes = Math.min(Math.max(0, Math.trunc(Number(step.event.removes)) || 0), fold.seen.get(step.event.id) ?? 0);
      fold.seen.set(step.event.id, 1);
    } else if (of !== undefined) {
      fold.seen.set(of, (fold.seen.get(of) ?? 0) + 1);
    }
    if (!step.ok) {
      // Every fold skips it; the one in use says so (a rebuilding fold met it before).
      if (fold === current || current === undefined) {
        deps.log.warn('skipping endpoint event', { stream: ENDPOINTS_STREAM, seq: m.seq, endpoint: step.endpoint, reason: step.reason });
        deps.skipped?.inc();
      }
      return removes;
    }
    const previous = fold.byId.get(step.state.id);
    const next = step.state;
    index(fold, next);
    // Only the fold in use tells listeners; a rebuilding fold reports its differences when swapped in.
    if (fold === current) notify(next, previous);
    return removes;
  };

  const moved = (fold: Fold) => { for (const wake of [...fold.progress]) wake(); };

  /** A fold of the stream from its start, or from a snapshot's sequence with the snapshot's view. */
  const startFold = async (from?: DirectorySnapshot): Promise<Fold> => {
    const consumer = await deps.js.consumers.get(ENDPOINTS_STREAM, from
      ? { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from.seq + 1 }
      : { deliver_policy: DeliverPolicy.All });
    const messages = await consumer.consume({ max_messages: 1024 });
    if (stopped) {
      await messages.close().catch(() => {});
      throw stoppedError();
    }
    const fold: Fold = { byId: new Map(), activeByTenant: new Map(), applied: 0, count: 0, seen: new Map(), pending: 0, progress: new Set(), messages, done: Promise.resolve(), ended: false };
    if (from) {
      for (const state of from.states) index(fold, state);
      fold.applied = from.seq;
      fold.count = from.count;
      // A snapshot written before it kept these has none: the first compaction then folds anew once.
      for (const [id, n] of Object.entries(from.seen ?? {})) fold.seen.set(id as EndpointId, n);
    }
    fold.done = (async () => {
      try {
        for await (const m of messages) {
          // At or below a sequence already skipped as no longer stored: removed since, so not applied.
          if (m.seq <= fold.applied) continue;
          const removes = apply(fold, m);
          fold.applied = m.seq;
          fold.count += 1 - removes;
          fold.pending = m.info.pending;
          moved(fold);
        }
      } catch (e) {
        if (!stopped) deps.log.error('endpoint directory consumer failed', { reason: describe(e) });
      }
      fold.ended = true;
      moved(fold);
    })();
    folds.add(fold);
    return fold;
  };

  const closeFold = async (fold: Fold) => {
    folds.delete(fold);
    await fold.messages.close().catch(() => {});
    await fold.done;
  };

  /** Resolves on the fold's next progress, after `ms`, or (rejecting) when the directory stops. */
  const progressOr = (fold: Fold, ms: number) => {
    let wake: () => void = () => {};
    let timer: NodeJS.Timeout | undefined;
    const progressed = new Promise<void>((resolve) => {
      wake = resolve;
      fold.progress.add(wake);
      timer = setTimeout(resolve, ms);
    });
    return orStop(progressed).finally(() => { fold.progress.delete(wake); clearTimeout(timer); });
  };

  /** Sequence of the first message stored at or after `seq`, or undefined when there is none. */
  const nextStored = async (seq: number): Promise<number | undefined> => {
    const query = { seq, next_by_subj: 'endpoints.>' }; // a variable: the client types only seq/last_by_subj
    const m = await deps.jsm.streams.getMessage(ENDPOINTS_STREAM, query);
    return m ? m.seq : undefined;
  };

  /** Marks everything up to `target` as reached: nothing stored is left there for the consumer to deliver. */
  const skipTo = (fold: Fold, target: number, why: string) => {
    if (fold.applied >= target) return;
    deps.log.warn('endpoint events no longer stored; skipped', { stream: ENDPOINTS_STREAM, from: fold.applied + 1, to: target, why });
    fold.applied = target;
    fold.pending = 0; // what was pending is gone
    moved(fold);
  };

  /** Waits until `fold` has passed `target` (applied it, or nothing stored is left up to it). */
  const reach = async (fold: Fold, target: number, state: StreamState) => {
    if (fold.applied >= target) return;
    if (state.messages === 0) return skipTo(fold, target, 'the stream is empty');
    let seen = fold.applied;
    let since = performance.now();
    while (fold.applied < target) {
      if (stopped) throw stoppedError();
      await progressOr(fold, probeMs);
      if (fold.applied >= target) return;
      if (fold.applied > seen) { seen = fold.applied; since = performance.now(); continue; }
      // No progress for a while: is anything still stored up to the target?
      let next: number | undefined;
      try {
        next = await orStop(nextStored(fold.applied + 1));
      } catch (e) {
        if (stopped) throw e;
        next = fold.applied + 1; // unknown: treat as still stored, and let the stall bound decide
        deps.log.warn('endpoint directory could not read the stream', { reason: describe(e) });
      }
      if (fold.applied >= target) return;
      if (next === undefined || next > target) return skipTo(fold, target, 'deleted or purged');
      if (fold.ended || performance.now() - since > stallMs) {
        throw new DirectoryStallError(`endpoint directory: no progress for ${Math.round(performance.now() - since)} ms at sequence ${fold.applied}, waiting for ${target} (stored: ${next})`);
      }
    }
  };

  /**
   * Why the stream no longer holds what `fold` applied, or undefined when it still does. `fold` is what the
   * fold had applied when `state` was asked for, not when the answer came: its consumer keeps applying
   * meanwhile, and a write stored during the request would look like a stream that lost it.
   */
  const removedSince = (fold: Pick<Fold, 'applied' | 'count'>, state: StreamState): string | undefined => {
    if (state.last_seq < fold.applied) return `the stream ends at ${state.last_seq}, before ${fold.applied} (recreated?)`;
    // Caught up at the time of the reading: every stored message up to here should be one applied.
    if (state.last_seq === fold.applied && state.messages < fold.count) return `${fold.count - state.messages} applied event(s) removed`;
    if (fold.count > 0 && state.messages === 0) return 'the stream was purged';
    return undefined;
  };

  /** The latest snapshot this stream can start from, or undefined (none, unusable, or of a stream since recreated). */
  const usableSnapshot = async (): Promise<DirectorySnapshot | undefined> => {
    try {
      const snapshot = await readSnapshot(deps.jsm);
      if (!snapshot) return undefined;
      const { state } = await deps.jsm.streams.info(ENDPOINTS_STREAM);
      if (snapshot.seq > state.last_seq) throw new UnusableSnapshotError(`it is at ${snapshot.seq}, past the stream's end ${state.last_seq} (recreated?)`);
      return snapshot;
    } catch (e) {
      if (isApiError(e, JetStreamApiCodes.StreamNotFound)) return undefined;
      deps.log.warn('endpoint directory snapshot not used; folding the whole stream', { reason: describe(e) });
      return undefined;
    }
  };

  const startedFrom = await usableSnapshot();
  let snapshotSeq = startedFrom?.seq ?? 0;
  current = await startFold(startedFrom);

  /** Folds the stream again from what is left, and swaps the new fold in once it has reached `target`. */
  const rebuild = async (why: string, target: number, state: StreamState) => {
    deps.log.warn('endpoint directory folds the stream anew', {
      stream: ENDPOINTS_STREAM, why, endpoints: current.byId.size, first_seq: state.first_seq, last_seq: state.last_seq, messages: state.messages,
    });
    const fresh = await startFold(); // from the start: a snapshot may hold what the stream lost
    try {
      await reach(fresh, target, state);
    } catch (e) {
      await closeFold(fresh);
      throw e;
    }
    const old = current;
    current = fresh;
    // Listeners learn every difference; an endpoint that is gone is reported deleted, so its deliveries stop.
    for (const [id, before] of old.byId) {
      const after = fresh.byId.get(id);
      if (!after) {
        if (before.status !== EndpointStatus.Deleted) notify({ ...before, status: EndpointStatus.Deleted }, before);
      } else if (after !== before) {
        notify(after, before);
      }
    }
    for (const [id, after] of fresh.byId) if (!old.byId.has(id)) notify(after, undefined);
    deps.log.warn('endpoint directory rebuilt', { endpoints: fresh.byId.size, was: old.byId.size, seq: fresh.applied });
    await closeFold(old);
  };

  // When a sync last proved the view complete, whether the latest one failed, and since when one runs.
  let completeAt = performance.now();
  let failing = false;
  let syncSince: number | undefined;
  const lagSeconds = () => {
    const now = performance.now();
    const behind = failing || current.ended || (syncSince !== undefined && now - syncSince > 1000);
    return behind ? (now - completeAt) / 1000 : 0;
  };

  const runOnce = async () => {
    if (stopped) throw stoppedError();
    // Read before the request: compared with the fold at the answer, endpoints created meanwhile made a
    // stream that "ends before" the fold, a rebuild reported every endpoint it had not reached yet as
    // deleted, and the delivery role deleted their consumers (a direct one then made again from its
    // start, sending again what it had sent: reconcile-races with 1,500 endpoints created beside it).
    const asked = { applied: current.applied, count: current.count };
    const { state } = await orStop(deps.jsm.streams.info(ENDPOINTS_STREAM));
    const why = current.ended ? 'its consumer ended' : removedSince(asked, state);
    if (why) return rebuild(why, state.last_seq, state);
    try {
      await reach(current, state.last_seq, state);
    } catch (e) {
      // Its consumer was deleted under it or stopped delivering: a new fold, not a failure for ever (issue 23).
      if (stopped || !(e instanceof DirectoryStallError)) throw e;
      await rebuild(`its consumer made no progress (${e.message})`, state.last_seq, state);
    }
  };

  // A shared request is safe only for callers that arrived before it was sent, so callers that come
  // while one is running share the next one.
  let running: Promise<void> | undefined;
  let queued: Promise<void> | undefined;
  const sync = (): Promise<void> => {
    if (queued) return queued;
    if (!running) {
      syncSince = performance.now();
      running = runOnce().then(
        () => { completeAt = performance.now(); failing = false; deps.lag?.set(0); },
        (e: unknown) => { failing = !stopped; deps.lag?.set(lagSeconds()); throw e; },
      ).finally(() => { running = undefined; syncSince = undefined; });
      return running;
    }
    queued = running.catch(() => {}).then(() => { queued = undefined; return sync(); });
    return queued;
  };

  const snapshot = (): DirectorySnapshot => ({ seq: current.applied, count: current.count, states: [...current.byId.values()], seen: Object.fromEntries(current.seen) });

  // One snapshot at a time, and only when no other instance wrote a recent enough one.
  let writing: Promise<void> | undefined;
  const snapshotEvery = deps.options?.snapshotEvery ?? 10_000;
  const maybeSnapshot = () => {
    if (snapshotEvery <= 0 || writing || stopped || current.ended || current.applied - snapshotSeq < snapshotEvery) return;
    writing = writeNext().finally(() => { writing = undefined; });
  };
  const writeNext = async () => {
    try {
      snapshotSeq = Math.max(snapshotSeq, await latestSnapshotSeq(deps.jsm));
      if (current.applied - snapshotSeq < snapshotEvery) return;
      const taken = snapshot(); // taken in one go: the view at exactly `seq`
      const { bytes } = await writeSnapshot(deps.js, taken);
      snapshotSeq = taken.seq;
      deps.log.info('endpoint directory snapshot written', { seq: taken.seq, endpoints: taken.states.length, bytes });
    } catch (e) {
      // Tried again after as many events again, not at every sync (a server refusing it would flood the log).
      snapshotSeq = current.applied;
      if (!stopped) deps.log.warn('endpoint directory snapshot not written; trying again after as many events again', { reason: describe(e), every: snapshotEvery });
    }
  };

  let healer: NodeJS.Timeout | undefined;
  let healWarned = false;
  const heal = () => {
    healer = setInterval(() => {
      deps.lag?.set(lagSeconds());
      if (running || stopped) return;
      sync().then(() => { healWarned = false; maybeSnapshot(); }, (e: unknown) => {
        if (stopped || healWarned) return;
        healWarned = true; // once per run of failures: a stalled fold fails every sync until it is replaced
        deps.log.warn('endpoint directory cannot catch up; trying again', { reason: describe(e), lag_s: Math.round(lagSeconds()) });
      });
    }, healMs);
    healer.unref();
  };

  const stop = async () => {
    stopped = true;
    clearInterval(healer);
    for (const cancel of [...onStop]) cancel(stoppedError());
    await Promise.all([...folds].map(closeFold));
    await writing;
  };

  try {
    await sync();
  } catch (e) {
    await stop();
    throw e;
  }
  deps.log.info('endpoint directory loaded', {
    endpoints: current.byId.size, seq: current.applied,
    ...(startedFrom ? { from_snapshot: startedFrom.seq, folded_after_it: current.applied - startedFrom.seq } : {}),
  });
  maybeSnapshot();
  heal();

  return {
    get: (id) => current.byId.get(id),
    activeFor: (tenant) => current.activeByTenant.get(tenant)?.values() ?? [],
    all: () => current.byId.values(),
    onChange: (l) => { listeners.add(l); return () => listeners.delete(l); },
    sync,
    behind: () => current.pending > 0,
    lastSeq: () => current.applied,
    lagSeconds,
    snapshot,
    stop,
  };
}
