// Endpoint health in the delivery role: which endpoints have failed every attempt since when, and the
// two decisions that follow (issue 10): a 410 Gone disables the endpoint (reason `gone`), and one whose
// attempts all failed for HOOKSTREAM_DISABLE_AFTER with no success in between is disabled (`failing`).
//
// Cheap for 10,000 endpoints: memory holds one number per endpoint that is failing right now; a success
// on a healthy endpoint costs one Map lookup. The clock is persisted only on transitions (first failure
// after a success, first success after failures, a disable) as one record per endpoint in
// ENDPOINT_HEALTH (max_msgs_per_subject 1), so a restart does not reset it. Every delivery instance folds
// that stream live, so a success seen by one instance resets the clock of all (attempts of one endpoint
// are spread over every instance's pull loop).
//
// Records expire (the stream's max_age, issue 23), so a failing endpoint's record is re-written while the
// endpoint is active and failing: every instance looks now and then, and the first whose (jittered) turn
// comes re-writes it on the sequence it folded, so a refresh never undoes a success written meanwhile and
// the others see the new record before their turn. A record older than the age is forgotten in memory too.
import { DeliverPolicy, JetStreamApiCodes, type ConsumerMessages, type JetStreamClient, type JetStreamManager } from '@nats-io/jetstream';
import { ENDPOINT_HEALTH_MAX_AGE_MS, ENDPOINT_HEALTH_STREAM, endpointHealthSubject, type EndpointHealthRecord } from '../../streams/endpoint-health.ts';
import { isApiError } from '../../streams/ensure.ts';
import { OpsEventType } from '../../streams/ops.ts';
import { DisabledReason, EndpointStatus, type EndpointState } from '../domain/endpoint.ts';
import type { EndpointId } from '../domain/ids.ts';
import type { EndpointDirectory } from '../endpoints/directory.ts';
import type { EndpointStore } from '../endpoints/store.ts';
import type { OpsEvents } from '../ops/events.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { describe } from '../errors.ts';

const GONE = 410;
/** How long start-up waits for the fold of ENDPOINT_HEALTH before going on with what it has. */
const CATCH_UP_MS = 5_000;

export interface AttemptResult {
  ok: boolean;
  status: number | null;
  /** When the attempt ended, ms since the epoch. */
  at: number;
  webhookId?: string;
  event?: string;
}

/** What the worker calls: once per attempt outcome, and before an attempt starts. */
export interface EndpointHealthHook {
  onAttemptResult(endpoint: EndpointState, result: AttemptResult): void;
  /** True while this process is disabling the endpoint and the directory does not show it yet: send nothing. */
  holds(id: EndpointId): boolean;
}

export interface EndpointHealth extends EndpointHealthHook {
  /** Waits for the decisions under way (disables, record writes). */
  stop(): Promise<void>;
}

export async function startEndpointHealth(deps: {
  js: JetStreamClient;
  jsm: JetStreamManager;
  store: Pick<EndpointStore, 'disable'>;
  directory: Pick<EndpointDirectory, 'get' | 'onChange'>;
  ops: OpsEvents;
  /** HOOKSTREAM_DISABLE_AFTER; 0 never disables for failing. */
  disableAfterMs: number;
  log: Logger;
  metrics: Pick<ServiceMetrics, 'endpointsDisabled'>;
  /** ENDPOINT_HEALTH's max_age (tests shorten it, with the stream's). */
  maxAgeMs?: number;
}): Promise<EndpointHealth> {
  const { js, log } = deps;
  const maxAgeMs = deps.maxAgeMs ?? ENDPOINT_HEALTH_MAX_AGE_MS;
  // Between a seventh and a fifth of the age: instances' turns differ, and six missed turns lose nothing.
  const refreshAfterMs = (maxAgeMs / 7) * (1 + Math.random() * 0.4);
  const failingSince = new Map<EndpointId, number>();
  /** The stored record of each failing endpoint: its sequence, and when it was written (monotonic ms). */
  const recorded = new Map<EndpointId, { seq: number; writtenAt: number }>();
  const refreshing = new Set<EndpointId>();
  const disabling = new Set<EndpointId>();
  const work = new Set<Promise<void>>();
  const track = (p: Promise<void>) => {
    work.add(p);
    void p.finally(() => work.delete(p));
  };

  const write = async (id: EndpointId, since: number | null, at: number): Promise<void> => {
    const record: EndpointHealthRecord = { v: 1, endpoint: id, failing_since: since === null ? null : new Date(since).toISOString(), at: new Date(at).toISOString() };
    try {
      await js.publish(endpointHealthSubject(id), JSON.stringify(record));
    } catch (e) {
      // Memory still holds the clock; only a restart before the next transition would lose it.
      log.warn('could not record endpoint health', { endpoint: id, reason: describe(e) });
    }
  };

  // The fold: the latest record of every endpoint, then every new one (this and other instances' writes).
  const applyRecord = (data: unknown, seq: number, ageMs: number) => {
    const r = data as Partial<EndpointHealthRecord> | undefined;
    if (!r || r.v !== 1 || typeof r.endpoint !== 'string') return;
    const id = r.endpoint as EndpointId;
    const since = typeof r.failing_since === 'string' ? Date.parse(r.failing_since) : NaN;
    if (Number.isFinite(since)) {
      failingSince.set(id, since);
      recorded.set(id, { seq, writtenAt: performance.now() - Math.max(0, ageMs) });
    } else {
      failingSince.delete(id);
      recorded.delete(id);
    }
  };
  const stored = (await deps.jsm.streams.info(ENDPOINT_HEALTH_STREAM)).state.messages;
  const consumer = await js.consumers.get(ENDPOINT_HEALTH_STREAM, { deliver_policy: DeliverPolicy.LastPerSubject });
  const messages: ConsumerMessages = await consumer.consume({ max_messages: 1024 });
  let caughtUp: () => void = () => {};
  const ready = new Promise<void>((resolve) => { caughtUp = resolve; });
  if (stored === 0) caughtUp();
  const fold = (async () => {
    for await (const m of messages) {
      // The record's age by the server's clock against ours, once: from then on the monotonic clock counts.
      try { applyRecord(m.json(), m.seq, Date.now() - Number(m.timestampNanos / 1_000_000n)); } catch { /* not JSON: skipped */ }
      if (m.info.pending === 0) caughtUp();
    }
  })().catch((e: unknown) => log.error('endpoint health fold stopped', { reason: describe(e) }));
  await Promise.race([ready, new Promise((r) => setTimeout(r, CATCH_UP_MS).unref())]);

  const refresh = async (id: EndpointId, since: number, seq: number): Promise<void> => {
    const record: EndpointHealthRecord = { v: 1, endpoint: id, failing_since: new Date(since).toISOString(), at: new Date().toISOString() };
    try {
      // Only over the record we folded: a success (or another instance's refresh) written since wins.
      await js.publish(endpointHealthSubject(id), JSON.stringify(record), { expect: { lastSubjectSequence: seq } });
    } catch (e) {
      if (!isApiError(e, JetStreamApiCodes.StreamWrongLastSequence)) log.warn('could not re-write endpoint health', { endpoint: id, reason: describe(e) });
    } finally {
      refreshing.delete(id);
    }
  };
  const sweep = () => {
    const now = performance.now();
    for (const [id, r] of recorded) {
      const age = now - r.writtenAt;
      if (age >= maxAgeMs) {
        // The stream has dropped it: nobody delivered for the endpoint for that long (deleted, disabled).
        recorded.delete(id);
        failingSince.delete(id);
        continue;
      }
      const since = failingSince.get(id);
      if (age < refreshAfterMs || since === undefined || refreshing.has(id) || deps.directory.get(id)?.status !== EndpointStatus.Active) continue;
      refreshing.add(id);
      track(refresh(id, since, r.seq));
    }
  };
  const sweeper = setInterval(sweep, refreshAfterMs / 4);
  sweeper.unref();
  sweep(); // now too: after a long stop, records near the age are re-written before the next look

  async function disable(endpoint: EndpointState, reason: DisabledReason, since: number | null): Promise<void> {
    const id = endpoint.id;
    try {
      const result = await deps.store.disable(id, reason);
      if (!result) {
        disabling.delete(id); // deleted, or disabled by another instance: nothing for us to do
        return;
      }
      deps.metrics.endpointsDisabled.inc({ reason });
      log.warn('endpoint disabled', { endpoint: id, tenant: endpoint.tenant, reason, failing_since: since === null ? null : new Date(since).toISOString() });
      // A restore starts the clock afresh.
      failingSince.delete(id);
      await write(id, null, Date.now());
      // The disable is stored in ENDPOINTS already; a lost notice must not undo or repeat it.
      await deps.ops.publishQuietly({
        v: 1, type: OpsEventType.EndpointDisabled, tenant: endpoint.tenant, endpoint: id, reason,
        at: result.endpoint.disabledAt ?? new Date().toISOString(), failing_since: since === null ? null : new Date(since).toISOString(),
      }, `disabled.${id}.${result.seq}`);
    } catch (e) {
      disabling.delete(id);
      log.error('could not disable endpoint; will decide again on its next attempt', { endpoint: id, reason: describe(e) });
    }
  }

  const startDisable = (endpoint: EndpointState, reason: DisabledReason, since: number | null) => {
    if (disabling.has(endpoint.id)) return;
    disabling.add(endpoint.id);
    track(disable(endpoint, reason, since));
  };

  const unsubscribe = deps.directory.onChange((next, previous) => {
    // The directory shows the disable now (or the endpoint left `active` another way): it holds the rest.
    if (next.status !== EndpointStatus.Active) disabling.delete(next.id);
    if (next.status === EndpointStatus.Deleted && previous?.status !== EndpointStatus.Deleted) {
      // A deleted endpoint's clock is forgotten, here and in the stream (issue 23: both only grew); every
      // instance does it, and a purge of an empty subject is nothing. A restore starts a new life.
      failingSince.delete(next.id);
      recorded.delete(next.id);
      track(deps.jsm.streams.purge(ENDPOINT_HEALTH_STREAM, { filter: endpointHealthSubject(next.id) }).then(() => {}, (e: unknown) => {
        log.warn('could not forget a deleted endpoint\'s health record', { endpoint: next.id, reason: describe(e) });
      }));
    }
    if (previous?.status === EndpointStatus.Disabled && next.status === EndpointStatus.Active) {
      // Every delivery instance sees the restore; the message id keeps one notice of it.
      track(deps.ops.publishQuietly({
        v: 1, type: OpsEventType.EndpointEnabled, tenant: next.tenant, endpoint: next.id, at: next.updatedAt,
        previous_reason: previous.disabledReason,
      }, `enabled.${next.id}.${next.version}`));
    }
  });

  return {
    holds: (id) => disabling.has(id),
    onAttemptResult(endpoint, r) {
      const id = endpoint.id;
      const since = failingSince.get(id);
      if (r.ok) {
        if (since === undefined) return; // the hot path: a healthy endpoint costs this lookup
        failingSince.delete(id);
        track(write(id, null, r.at));
        track(deps.ops.publishQuietly({
          v: 1, type: OpsEventType.AttemptRecovered, tenant: endpoint.tenant, endpoint: id, at: new Date(r.at).toISOString(),
          failing_since: new Date(since).toISOString(), webhook_id: r.webhookId ?? null, event_type: r.event ?? null,
        }, `recovered.${id}.${since}`));
        return;
      }
      if (r.status === GONE) {
        startDisable(endpoint, DisabledReason.Gone, since ?? null);
        return;
      }
      if (since === undefined) {
        // An attempt that was under way when its endpoint was deleted: its clock was just forgotten.
        if (deps.directory.get(id)?.status === EndpointStatus.Deleted) return;
        failingSince.set(id, r.at);
        track(write(id, r.at, r.at));
        return;
      }
      if (deps.disableAfterMs > 0 && r.at - since >= deps.disableAfterMs) startDisable(endpoint, DisabledReason.Failing, since);
    },
    async stop() {
      clearInterval(sweeper);
      unsubscribe();
      await Promise.allSettled([...work]);
      await messages.close().catch(() => {});
      await fold;
    },
  };
}
