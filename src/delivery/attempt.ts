// One delivery attempt and the fate of its message, decided in one place: prepare (is the endpoint still
// taking deliveries, is the message well-formed), send the signed POST, then ack (2xx), retry (left unacked
// for the consumer's backoff, or nak'd later for Retry-After or a rate limit) or give up (the last allowed
// attempt: a plain nak, so the server raises the max-deliveries advisory at once and a dead letter follows).
import { DeliveryHeader } from '../../streams/deliveries.ts';
import { isPartitionStream } from '../../streams/events.ts';
import { attemptSubject, type AttemptRecord } from '../../streams/attempts.ts';
import { EndpointStatus, liveSecrets, Ordering, type EndpointState, type SealedSecret } from '../domain/endpoint.ts';
import type { EndpointId } from '../domain/ids.ts';
import { signingKeyFor, type SigningKey } from '../domain/signature.ts';
import type { EndpointDirectory } from '../endpoints/directory.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import { createSampledWarnings } from '../sampled-log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import type { AckedPublisher } from '../nats/acked-publisher.ts';
import type { PulledMsg } from '../nats/pulled-msg.ts';
import type { ConcurrencyLimit } from './concurrency.ts';
import type { EndpointHealthHook } from './endpoint-health.ts';
import type { AttemptOutcome } from './http-sender.ts';
import type { InFlight } from './in-flight.ts';
import type { RateGates } from './rate-gate.ts';
import { planNextAttempt } from './next-attempt.ts';
import { honoursRetryAfter, parseRetryAfter } from './retry-after.ts';
import { deliveryHeaders } from './sign-request.ts';
import type { WaitingRetries } from './waiting-retries.ts';
import type { StoredAcks } from './stored-acks.ts';
import type { RecentAcks } from './recent-acks.ts';
import type { AttemptLogRecorder } from '../deliverylog/recorder.ts';
import { attemptAnswered, contextOf, directContextOf, traceAttempt, traceparentOf, tracing } from '../telemetry/tracing.ts';
import type { Span } from '@opentelemetry/api';
import { isDataKeyErased, type DataKeys } from '../erasure/data-keys.ts';
import type { DirectEvent, DirectEvents } from './direct-events.ts';
import type { ProducerClaims } from './producer-claims.ts';
import type { OrderingCutoffs } from './ordering-cutoffs.ts';
import type { DirectCut } from './direct-cut.ts';

export type BodyOpener = Pick<DataKeys, 'open'>;

export interface Sender {
  send(req: { url: string; pool?: string; headers: Record<string, string>; body: string | Buffer }): Promise<AttemptOutcome>;
  /** A stop: POSTs still waiting for a connection end unsent (`not_sent`). */
  stopWaiting?(): void;
}

export interface SecretOpener {
  /** Throws when the value was sealed for another endpoint (issue 8). */
  open(sealed: string, endpointId: EndpointId): string;
}

/** What an attempt needs of its endpoint's lane: whose it is, the concurrency it adjusts, whether it stopped. */
export interface AttemptLane {
  id: EndpointId;
  limit: ConcurrencyLimit;
  readonly closed: boolean;
}

export interface Attempts {
  /**
   * Attempt `tracked` once and settle its message. `release` gives the lane's slot back as soon as the
   * HTTP answer is in (before any rate-limit hold).
   */
  attempt(lane: AttemptLane, tracked: InFlight, release: () => void): Promise<void>;
  /** Drop what is kept for a deleted endpoint (its opened signing keys). */
  forget(id: EndpointId): void;
  /** Drop opened keys no longer live (a rotated-out secret past its grace, on an endpoint idle since). */
  forgetExpiredKeys(now: number): void;
}

/**
 * A delivery routed from a view of the endpoint older than its latest restore, hence from before the
 * delete that preceded it (the router only routes to active endpoints). Sequences of the one ENDPOINTS
 * stream, so no clock is compared. A replay is an operator's decision taken after the restore: delivered.
 * A message without the header (routed by an older version) is delivered as before.
 */
export function routedBeforeRestore(state: Pick<EndpointState, 'activeSince'>, m: Pick<PulledMsg, 'headers'>): boolean {
  if (state.activeSince === undefined || !m.headers || m.headers.has(DeliveryHeader.Replay)) return false;
  const routed = Number(m.headers.get(DeliveryHeader.EndpointVersion));
  return Number.isSafeInteger(routed) && routed > 0 && routed < state.activeSince;
}

const FAILURE_WARNING_INTERVAL_MS = 5 * 60_000;
const SETTLED = Promise.resolve();
const ACK = { fate: 'ack' } as const;
const HOLD = { fate: 'hold' } as const;
/** `f` of a value known now or later: a promise only when it is one. */
const then = <T, U>(v: T | Promise<T>, f: (x: T) => U | Promise<U>): U | Promise<U> => (v instanceof Promise ? v.then(f) : f(v));

type Prepared =
  | { fate: 'hold' }
  | { fate: 'ack' }
  | { fate: 'term' }
  | Deliver;
/** `body`: a direct delivery's, made from its event; else the message's own, opened if sealed. */
type Deliver = { fate: 'send'; state: EndpointState; webhookId: string; event: string; body?: Buffer };

export function createAttempts(deps: {
  directory: EndpointDirectory;
  sender: Sender;
  secrets: SecretOpener;
  /** Failed-attempt records go through it rather than js.publish (src/nats/acked-publisher.ts). */
  publisher: AckedPublisher;
  /** Issue 10: told every attempt's outcome (410 and long failure disable the endpoint). */
  health: EndpointHealthHook | undefined;
  /** The messages the sweep keeps alive: a failed attempt leaves it, a final one held for its rate limit rejoins. */
  inFlight: Set<InFlight>;
  /** 2xx deliveries acked here, for one whose ack the server lost (src/delivery/recent-acks.ts). */
  recentAcks: RecentAcks;
  /** Acks of 2xx deliveries, each after the record that it was stored (src/delivery/stored-acks.ts). */
  stored: StoredAcks;
  /** Tokens of rate-limited endpoints, taken before each attempt. */
  rates: RateGates;
  /** Failed deliveries left waiting for their retry, for retry-now. */
  retries: WaitingRetries;
  retrySchedule: number[];
  log: Logger;
  metrics: ServiceMetrics;
  /** Every attempt's entry in the operators' delivery log (src/deliverylog/recorder.ts). */
  attemptLog?: AttemptLogRecorder;
  /** Opens a sealed body just before it is signed; absent: bodies are sent as stored. */
  bodies?: BodyOpener | undefined;
  /** Direct delivery: copies of events read from the partition streams (src/delivery/direct-events.ts). */
  direct?: DirectEvents | undefined;
  /** Direct delivery: which event holds a producer id (src/delivery/producer-claims.ts). */
  claims?: ProducerClaims | undefined;
  /** Direct delivery: what an endpoint made ordered still sends directly (src/delivery/ordering-cutoffs.ts). */
  cutoffs?: OrderingCutoffs | undefined;
  /** Direct delivery turned off: what its consumers still send (src/delivery/direct-cut.ts). */
  cut?: DirectCut | undefined;
}): Attempts {
  const { directory, sender, log, metrics, inFlight, retrySchedule } = deps;
  const maxDeliver = retrySchedule.length + 1;
  // A failing endpoint's first failed attempt is a warning, then one every 5 minutes; the rest at debug.
  const failures = createSampledWarnings(log, { intervalMs: FAILURE_WARNING_INTERVAL_MS });
  // Each event type's two counters of every attempt, looked up once (no more entries than the counters' own series).
  const counted = new Map<string, { attempts: { inc(): void }; acknowledged: { inc(): void } }>();
  const countersOf = (event: string) => {
    let c = counted.get(event);
    if (!c) counted.set(event, (c = { attempts: metrics.attempts.series({ event }), acknowledged: metrics.acknowledged.series({ event }) }));
    return c;
  };

  // Opening a sealed secret costs a libsodium call: each endpoint keeps the keys of its live secrets, and
  // only those (a rotation's old key goes with its grace period). Per endpoint: a value copied to another
  // endpoint must meet open()'s binding check there, not a cache hit.
  // Checked by the endpoint's state object (the directory replaces it on every change) and the time its
  // next live secret expires, so a delivery does not list, filter and join the secrets again.
  const keyCache = new Map<EndpointId, { state: EndpointState; until: number; sealed: string; keys: SigningKey[] }>();
  const sealedOf = (live: SealedSecret[]) => live.map((s) => s.sealed).join(' ');
  const keysFor = (state: EndpointState, now: number): SigningKey[] => {
    const cached = keyCache.get(state.id);
    if (cached?.state === state && now < cached.until) return cached.keys;
    const live = liveSecrets(state, now);
    const sealed = sealedOf(live);
    const until = Math.min(...live.map((s) => (s.expires_at === null ? Infinity : Date.parse(s.expires_at))));
    if (cached?.sealed === sealed) {
      cached.state = state;
      cached.until = until;
      return cached.keys;
    }
    const keys = live.map((s) => signingKeyFor(state.signatureScheme, deps.secrets.open(s.sealed, state.id)));
    keyCache.set(state.id, { state, until, sealed, keys });
    return keys;
  };

  async function recordFailure(record: AttemptRecord): Promise<void> {
    try {
      await deps.publisher.publish(attemptSubject(record.endpoint, record.webhook_id), JSON.stringify(record));
    } catch (e) {
      log.warn('could not record attempt', { endpoint: record.endpoint, webhook_id: record.webhook_id, reason: describe(e) });
    }
  }

  /** A partition stream's copy of an event (direct delivery): what to send, or nothing (acked unsent). */
  function prepareDirect(endpointId: EndpointId, state: EndpointState, direct: DirectEvents, m: PulledMsg, covered: boolean): Prepared | Promise<Prepared> {
    // A type the endpoint does not take, as this process knows it. The API widens the consumer's filter
    // before it stores the PATCH that adds a type (streams/direct.ts), so the copy may be of a PATCH this
    // view has not read yet: read up to now first (a sync failing: held, handed out again later).
    if (!direct.taken(m, state)) return covered ? ACK : directory.sync().then(() => prepare(endpointId, m, true), () => HOLD);
    // One the router refuses; one stored before the consumer's start (`directAfter`, src/domain/endpoint.ts).
    const e = direct.of(m);
    if (!e || e.seq <= (state.directAfter ?? 0)) return ACK;
    const deliver: Deliver = { fate: 'send', state, webhookId: e.webhookId, event: e.event, body: e.body };
    // The router counts the deliveries it queues (hookstream_deliveries_enqueued_total); a direct
    // consumer's are counted when first handed out to be sent.
    const send = (): Prepared => {
      if (m.info.deliveryCount === 1) metrics.deliveriesEnqueued.inc({}, 1);
      return deliver;
    };
    // Made ordered since: what was stored from the switch on is the router's (ordering-cutoffs.ts).
    const ours = state.ordering === Ordering.Key && deps.cutoffs ? deps.cutoffs.sendsDirect(state, e.seq) : true;
    // Direct delivery turned off: what was stored from `until` on is the routers' (direct-cut.ts).
    const inWindow = deps.cut ? deps.cut.sends(e.seq) : true;
    return then(ours, (yes) => then(inWindow, (inside) => {
      if (!yes || !inside) return ACK;
      if (e.producerId === undefined || !deps.claims) return send();
      // A producer's retried publish of an event the endpoint gets (or got).
      return then(deps.claims.holder(e.producerId, e.seq), (h) => (h === e.seq ? send() : duplicate(endpointId, e, h)));
    }));
  }

  function duplicate(endpointId: EndpointId, e: DirectEvent, holder: number): Prepared {
    log.debug('event dropped: a retried publish of an earlier event (same producer id)', { endpoint: endpointId, seq: e.seq, webhook_id: e.webhookId, first_seq: holder });
    return ACK;
  }

  /**
   * Before sending: whether the endpoint still takes this message, and what to send; a promise only for a
   * direct copy whose fate needs a read (its producer id's mark, the time of an ordering switch).
   */
  function prepare(endpointId: EndpointId, m: PulledMsg, covered = false): Prepared | Promise<Prepared> {
    const state = directory.get(endpointId);
    // Disabled (issue 10): held in its queue, not acked; the consumer stops pulling and hands it out
    // again after a restore.
    if (state?.status === EndpointStatus.Disabled || deps.health?.holds(endpointId)) return HOLD;
    // A deleted endpoint gets nothing more.
    if (!state || state.status !== EndpointStatus.Active) return ACK;
    if (deps.direct?.is(m)) return prepareDirect(endpointId, state, deps.direct, m, covered);
    if (routedBeforeRestore(state, m)) {
      // The router routed it before it learned of a delete, and it was stored after the delete's purge.
      log.info('delivery routed before the endpoint was deleted; dropped', {
        endpoint: endpointId, webhook_id: m.headers?.get(DeliveryHeader.WebhookId), seq: m.seq,
      });
      return ACK;
    }
    const webhookId = m.headers?.get(DeliveryHeader.WebhookId);
    const event = m.headers?.get(DeliveryHeader.Event);
    if (!webhookId || !event) {
      log.error('delivery message without webhook-id or event header; dropped', { endpoint: endpointId, seq: m.seq });
      return { fate: 'term' };
    }
    return { fate: 'send', state, webhookId, event };
  }

  // Not an async function: the common attempt's promise is its POST's (deliver), with no wrapper around it.
  function attempt(lane: AttemptLane, tracked: InFlight, release: () => void): Promise<void> {
    // The one rate-limit check of the hot path: endpoints without a limit pay this null test and nothing
    // else. Waiting for a token is not an attempt; the sweep keeps the message alive meanwhile.
    const rateLimit = directory.get(lane.id)?.rateLimit ?? null;
    if (rateLimit !== null) return limited(lane, tracked, release, rateLimit);
    try {
      return settle(lane, tracked, release) ?? SETTLED;
    } catch (e) {
      return Promise.reject(e);
    }
  }

  async function limited(lane: AttemptLane, tracked: InFlight, release: () => void, rateLimit: number): Promise<void> {
    if (await deps.rates.acquire(lane.id, rateLimit, () => lane.closed)) await settle(lane, tracked, release);
  }

  /** Prepared, then sent (traced or not), or settled at once (undefined). */
  function settle(lane: AttemptLane, tracked: InFlight, release: () => void): Promise<void> | undefined {
    const prepared = prepare(lane.id, tracked.msg);
    return prepared instanceof Promise ? prepared.then((p) => settleAs(lane, tracked, release, p)) : settleAs(lane, tracked, release, prepared);
  }

  function settleAs(lane: AttemptLane, tracked: InFlight, release: () => void, prepared: Prepared): Promise<void> | undefined {
    const m = tracked.msg;
    if (prepared.fate === 'hold') return;
    if (prepared.fate === 'ack') return void m.ack();
    if (prepared.fate === 'term') return void m.term();
    if (!tracing.on) return deliver(lane, tracked, release, prepared);
    // Traced: an HTTP client span in the trace its delivery message carries, whichever instance sends it;
    // a direct copy carries none of the router's, whose span is named from the event instead.
    const { state, webhookId, event } = prepared;
    const parent = isPartitionStream(m.info.stream) ? directContextOf(m.headers, webhookId) : contextOf(m.headers);
    return traceAttempt(parent, {
      endpoint: lane.id, tenant: state.tenant, event, webhookId, url: state.url, attempt: m.info.deliveryCount,
      replay: m.headers?.get(DeliveryHeader.Replay),
    }, (span) => deliver(lane, tracked, release, prepared, span));
  }

  /** Send the signed POST, then ack, retry or give up. */
  async function deliver(lane: AttemptLane, tracked: InFlight, release: () => void, { state, webhookId, event, body: made }: Deliver, span?: Span): Promise<void> {
    const endpointId = lane.id;
    const m = tracked.msg;
    const n = m.info.deliveryCount;
    // Wall time where a time is written down (signatures, records); the monotonic clock for durations.
    const startedAt = Date.now();
    const started = performance.now();
    let plain: Uint8Array;
    try {
      // Opened at once when its keys are in memory: awaited only when it is a promise (a turn saved).
      const opened = made ?? (deps.bodies ? deps.bodies.open(m.data) : m.data);
      plain = opened instanceof Promise ? await opened : opened;
    } catch (e) {
      if (!isDataKeyErased(e)) throw e;
      // Its subject was erased (the key that sealed it is destroyed): dropped unsent, never dead-lettered.
      log.info('delivery dropped: its data subject was erased', { endpoint: endpointId, webhook_id: webhookId, seq: m.seq });
      deps.attemptLog?.record({ tenant: state.tenant, endpoint: endpointId, webhook_id: webhookId, event, attempt: n, at: startedAt,
        duration_ms: 0, status: null, outcome: 'dropped', error: 'dropped: its data subject was erased' });
      return void m.ack();
    }
    const body = Buffer.from(plain.buffer, plain.byteOffset, plain.byteLength);
    const headers = deliveryHeaders({ webhookId, event, keys: keysFor(state, startedAt), body, now: startedAt });
    // Not signed, so off by default (HOOKSTREAM_FORWARD_TRACEPARENT); tracestate and baggage never go out.
    if (span && tracing.forwardTraceparent) headers['traceparent'] = traceparentOf(span);
    const counters = countersOf(event);
    const outcome = await sender.send({ url: state.url, pool: state.tenant, headers, body });
    // Never sent (this process stops while it waited for a connection): no attempt; handed back at once.
    if (!outcome.ok && outcome.kind === 'not_sent') return void m.nak();
    counters.attempts.inc();
    if (span) attemptAnswered(span, outcome);
    const ended = performance.now();
    const endedAt = Date.now();
    deps.health?.onAttemptResult(state, { ok: outcome.ok, status: outcome.status, at: endedAt, webhookId, event });
    // The limit learns from the answer before the freed slot goes to a waiting message.
    if (outcome.ok) lane.limit.succeeded();
    else if (outcome.status === 429) lane.limit.throttled(started, ended);
    else lane.limit.failed();
    release();
    metrics.attemptSeconds.observe(outcome.durationMs / 1000);
    const logged = {
      tenant: state.tenant, endpoint: endpointId, webhook_id: webhookId, event, attempt: n, at: startedAt,
      duration_ms: outcome.durationMs, status: outcome.status, ...(outcome.bodySnippet ? { body: outcome.bodySnippet } : {}),
    };

    if (outcome.ok) {
      const failed = failures.clear(endpointId);
      if (failed !== undefined) log.info('endpoint accepts deliveries again', { endpoint: endpointId, tenant: state.tenant, failed_attempts: failed });
      deps.recentAcks.add(m);
      deps.attemptLog?.record({ ...logged, outcome: 'ok' });
      if (!deps.stored.ack(m, endpointId)) m.ack();
      counters.acknowledged.inc();
      return;
    }
    inFlight.delete(tracked);
    metrics.failed.inc({ event, kind: outcome.kind });
    const retryAfterMs = honoursRetryAfter(outcome.status) ? parseRetryAfter(outcome.retryAfter, endedAt) : undefined;
    const last = Math.max(n, tracked.handedOut ?? 0) >= maxDeliver;
    // Not the last attempt: the schedule's next step, or later when Retry-After or the rate limit's slot
    // hold asks for it; still one delivery of max_deliver, so it counts as one attempt.
    const plan = last ? undefined : planNextAttempt({
      now: ended, step: tracked.wait, firstStep: retrySchedule[0]!, retryAfterMs,
    });
    if (plan) m.nak(plan.delayMs);
    // The plan is on the monotonic clock (as retry-now's due times); records go by the wall clock.
    const nextAt = plan ? endedAt + (plan.at - ended) : undefined;
    if (plan) deps.retries.remember(endpointId, m.info.stream, m.seq, m.reply, plan.at);
    deps.attemptLog?.record({
      ...logged, outcome: last ? 'dead' : 'failed', error_class: outcome.kind, error: outcome.error, ...(nextAt !== undefined ? { next_at: nextAt } : {}),
    });
    failures.warn(endpointId, 'delivery attempt failed', {
      endpoint: endpointId, tenant: state.tenant, webhook_id: webhookId, event, attempt: n,
      status: outcome.status, reason: outcome.error, final: last,
    });
    await recordFailure({
      v: 1, endpoint: endpointId, webhook_id: webhookId, event, attempt: n, at: new Date(startedAt).toISOString(),
      duration_ms: outcome.durationMs, status: outcome.status, error: outcome.error,
      next_attempt_at: nextAt !== undefined ? new Date(nextAt).toISOString() : null,
      ...(retryAfterMs !== undefined ? { retry_after_ms: retryAfterMs } : {}),
      ...(plan && plan.by !== 'schedule' ? { next_attempt_by: plan.by } : {}),
      ...(isPartitionStream(m.info.stream) ? { copy: { stream: m.info.stream, seq: m.seq } } : {}),
    });
    if (last) {
      metrics.dead.inc({ event });
      m.nak(); // past max_deliver: the server raises the max-deliveries advisory now, not after another wait
    }
    // Otherwise left unacked (or nak'd with a delay) on purpose: the consumer's backoff brings the next attempt.
  }

  return {
    attempt, forget: (id) => void keyCache.delete(id),
    forgetExpiredKeys(now) {
      for (const [id, cached] of keyCache) {
        const state = directory.get(id);
        if (!state || sealedOf(liveSecrets(state, now)) !== cached.sealed) keyCache.delete(id);
      }
    },
  };
}
