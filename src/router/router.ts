// The router: reads EVENTS through its durable consumer, checks each event, and fans it out to the
// DELIVERIES stream of every active endpoint of the tenant whose subscription matches. Publishes are
// idempotent (Nats-Msg-Id per endpoint, see dedupe.ts), and the event is acked only after its whole
// fan-out is stored and written down in ROUTED (routed-log.ts), so a crash or redelivery never loses a
// delivery, and an event delivered again republishes only what its earlier deliveries did not store.
//
// An event is routed at once with the endpoint directory as it is, and acked only after a directory sync
// that started after it was read (src/router/cover.ts) has shown whether an endpoint write acked before
// the event was published was still missing: such an endpoint gets the event then, before the ack. So an
// endpoint created (or restored, or subscribed) before an event is published receives it, without a
// JetStream API round trip on the path of every event (issue 13: one per event in series before).
import { setTimeout as sleep } from 'node:timers/promises';
import type { ConsumerMessages, JetStreamClient, JetStreamManager, JsMsg } from '@nats-io/jetstream';
import type { NatsConnection, Subscription } from '@nats-io/nats-core';
import { EVENTS_STREAM, eventsStart, ROUTER_CONSUMER, ROUTER_MAX_DELIVER } from '../../streams/events.ts';
import { DELIVERY_MAX_BODY, deliveryAddress, DeliveryHeader, MAX_QUEUED_PER_ENDPOINT, QUEUE_FULL_CODE } from '../../streams/deliveries.ts';
import { matchesAny, type EventName } from '../domain/catalogue.ts';
import { encodeDelivery, mayOutgrow, parseEvent, RejectionReason, type EventLimits } from '../domain/event-data.ts';
import type { EndpointId, TenantId } from '../domain/ids.ts';
import type { EndpointDirectory } from '../endpoints/directory.ts';
import { Ordering, type EndpointState } from '../domain/endpoint.ts';
import type { Logger } from '../log.ts';
import { Attr, noteOnActiveSpan, traceRouting, tracing, writeContext } from '../telemetry/tracing.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { describe } from '../errors.ts';
import { PublishRejectedError, type AckedPublisher } from '../nats/acked-publisher.ts';
import type { OpsEvents } from '../ops/events.ts';
import type { ConsumerLeaders } from '../nats/consumer-leaders.ts';
import type { WebhookIdCodec } from '../domain/webhook-id.ts';
import { fanOutMsgIdPrefix } from './dedupe.ts';
import { MSG_ID_HEADER } from '../domain/producer-id.ts';
import { HeaderBlock } from '../nats/header-block.ts';
import { SERVICE_INBOX_PREFIX } from '../nats/connect.ts';
import { createVerdicts, exceptionDetail, isEventsFault, LAST_ROUTING_DELIVERY } from './verdict.ts';
import { createSyncCover } from './cover.ts';
import { createRoutedLog } from './routed-log.ts';
import { createDroppedDeliveries } from './dropped.ts';
import type { AttemptLogRecorder } from '../deliverylog/recorder.ts';
import { deliverySubject, eventOrdering } from './ordering.ts';
import type { ErasureIndexWriter } from '../erasure/index-writer.ts';
import type { DataKeys } from '../erasure/data-keys.ts';
import { createKeyedQueueBound } from './keyed-bound.ts';
import { createLateMarks } from './late-marks.ts';
import { createFairPublishes } from './fair-publishes.ts';
import { createTenantBacklog } from './tenant-backlog.ts';
import { createTenantProgress } from './tenant-progress.ts';
import { createTenantShare, type OverLimit } from './tenant-share.ts';
import { createDrains } from './drains.ts';
import { LIMIT_NAMES, type TenantLimits } from '../tenants/limits.ts';
import type { DirectWindow } from '../delivery/direct-window.ts';

/**
 * Deliveries of events being routed at once, at most (a bound on memory: events stop being read past it).
 * Far above one tenant's share below, so it is reached only when many tenants are busy at once.
 */
const MAX_ROUTING = 65_536;
/**
 * Fan-out publishes awaiting their ack at once at most, and one tenant's share of them; the window itself
 * aims at a short wait for acks below that (src/router/fair-publishes.ts).
 */
const PUBLISH_WINDOW = 4096;
const TENANT_PUBLISH_WINDOW = 1024;
/**
 * A tenant whose fan-outs have this many publishes pending has its next events wait, unrouted and in order,
 * until they drop below it: a fan-out far larger than its share costs memory for its deliveries only a
 * share at a time, and never stops the router reading (and routing) other tenants' events.
 */
const TENANT_PENDING = 4096;
/**
 * Events of one tenant waiting for one of its limits (events a second, queued deliveries), at most: a waiting
 * event keeps its place in the router's consumer window (4,096 events, every tenant's), so past this the
 * tenant's oldest waiting event is routed as each new one comes; a limit never takes the others' window.
 */
export const TENANT_DEFERRED = 1024;
/**
 * Past this many of a tenant's events waiting for its limits, the router drains the tenant from EVENTS at its
 * rate instead (src/router/drains.ts): its events then take no place in the shared window at all. The bound
 * above stays for a router that cannot start drains (a NATS user without ROUTER_DRAINS).
 */
const TENANT_DRAIN_AFTER = 64;
/**
 * Covering syncs at most this often: an event's ack waits up to this long plus a round trip (the ack, not
 * its deliveries); at 1,000 events/s, 100 syncs/s instead of 1,000.
 */
const COVER_INTERVAL_MS = 10;
/** Routed events are written down (and then acked) this often: a few publishes a second. */
const ROUTED_FLUSH_MS = 10;
/** A router message waiting longer than this (publish acks, a sync) is marked working, far within its 30 s ack wait. */
const KEEP_ALIVE_MS = 10_000;
/**
 * What a stopping router hands back comes again after this long, not at once: nats-server 2.9 can give a
 * message redelivered at once to the stopped router's own pull request, still queued at the server, and it
 * then waits out its ack wait (30 s). Seen in about half of in-process restarts; with the delay, in none of 32.
 */
const HAND_BACK_DELAY_MS = 1000;
/** A stop waits this long at most for its subscription's drain (the server's answer to a ping). */
const SUBSCRIPTION_DRAIN_MS = 1000;

/** The subscription nats.js's consume() reads from (PullConsumerMessagesImpl.sub); undefined if it moves. */
function subscriptionOf(messages: ConsumerMessages): Subscription | undefined {
  const sub = (messages as Partial<{ sub: Subscription }>).sub;
  return typeof sub?.drain === 'function' ? sub : undefined;
}

export interface Router {
  /** Events this process handed back for NATS's reasons and still waiting for their next try (readiness). */
  waiting(): { events: number; longestMs: number };
  stop(): Promise<void>;
  /** Settles when the routing loop ends (src/supervisor/roles.ts). */
  readonly done: Promise<void>;
}

export async function startRouter(deps: {
  /** Its own plain requests' connection (the drain records' reads, src/router/drains.ts). */
  nc: NatsConnection;
  js: JetStreamClient;
  jsm: JetStreamManager;
  /** Fan-out publishes go through it rather than js.publish (src/nats/acked-publisher.ts). */
  publisher: AckedPublisher;
  directory: EndpointDirectory;
  shards: number;
  log: Logger;
  metrics: ServiceMetrics;
  /** Webhook ids from the event's place in EVENTS, so a redelivered event gets the same id. */
  webhookIds: WebhookIdCodec;
  /** Checked on every event before anything else (HOOKSTREAM_MAX_EVENT_BYTES, nesting depth). */
  limits: EventLimits;
  /** Pulls again when the router's consumer elects a leader (src/nats/consumer-leaders.ts). */
  leaders?: ConsumerLeaders;
  /** Where a full queue's refusals are noticed (src/router/dropped.ts); absent in tests that do not look. */
  ops?: OpsEvents;
  /** HOOKSTREAM_MAX_QUEUED, for the record of a refusal. */
  maxQueued?: number;
  /** Where each event's copies are written down by subject id before its ack (issue 22); absent in tests that do not erase. */
  erasureIndex?: ErasureIndexWriter;
  /** The operators' delivery log, told of each refused delivery (src/deliverylog/recorder.ts). */
  attemptLog?: AttemptLogRecorder;
  /** Each tenant's limits (src/tenants/limits.ts); the defaults without it (a process with no database). */
  tenantLimits?: { current(tenant: TenantId): TenantLimits };
  /**
   * Direct delivery's window (streams/direct.ts, src/delivery/direct-window.ts): events stored in it are
   * queued for ordered endpoints only. Absent: no partitions, so never direct.
   */
  window?: DirectWindow;
  /** Seals each delivery body under its event's data key (crypto-shredding, src/erasure/data-keys.ts); absent: plain bodies. */
  bodies?: Pick<DataKeys, 'seal'>;
}): Promise<Router> {
  const { js, directory, log, metrics } = deps;
  const { epochMs } = await eventsStart(deps.jsm);
  const storedAt = (m: JsMsg) => Number(m.timestampNanos / 1_000_000n);
  const consumer = await js.consumers.get(EVENTS_STREAM, ROUTER_CONSUMER);
  const messages = await consumer.consume({ max_messages: 512 });
  const untrackLeader = deps.leaders?.track(EVENTS_STREAM, ROUTER_CONSUMER, messages);
  const { publisher } = deps;
  const fair = createFairPublishes(publisher, { window: PUBLISH_WINDOW, perTenant: TENANT_PUBLISH_WINDOW });
  const backlog = createTenantBacklog({ jsm: deps.jsm, shards: deps.shards, tenantOf: (id) => directory.get(id as EndpointId)?.tenant, log });
  const share = createTenantShare({ limits: deps.tenantLimits, backlog });
  // Issue 29: keyed deliveries wait for their own tenant's earlier events only, not every tenant's.
  const progress = createTenantProgress();
  let stopping = false;

  // A tenant over its limits is drained from EVENTS at its rate, out of the shared window (drains.ts): its
  // drained events are routed here with the barrier the drain gives, and tell the drain once stored.
  const drainBarrier = new WeakMap<JsMsg, number>();
  const drainStored = new WeakMap<JsMsg, () => void>();
  const pacing = new Set<string>();
  const drains = createDrains({
    jsm: deps.jsm, nc: deps.nc, inboxPrefix: SERVICE_INBOX_PREFIX, publisher, log,
    changed: (tenant) => redecide(tenant),
    owning: (n) => metrics.drains.set(n),
    pace(tenant) {
      const why = share.check(tenant);
      if (!why) { pacing.delete(tenant); return undefined; }
      // Counted once per event that waits (each wait asks again).
      if (!pacing.has(tenant)) { pacing.add(tenant); metrics.tenantLimitHits.inc({ limit: LIMIT_NAMES[why.limit] }); }
      notice(tenant, why, undefined);
      return why.retryMs;
    },
    drained: {
      route(m, barrier, stored) {
        drainBarrier.set(m, barrier);
        drainStored.set(m, stored);
        // As arrive: not before this process knows direct delivery's window for it.
        const known = windowKnown(m);
        if (known) void known.then(() => routeNow(m));
        else void routeNow(m);
      },
      keyOf(m) {
        const parsed = parseEvent(m.subject, m.data, deps.limits);
        if (!parsed.ok) return null;
        const keyed = eventOrdering(m.headers, parsed.tenant, parsed.type, parsed.data);
        return keyed.ok ? keyed.ordering?.token ?? null : null;
      },
    },
  });

  // Endpoint writes acked before an event was published must reach it: a sync that started after the
  // event was read has applied them, so each event's ack waits for one (shared, see cover.ts).
  const cover = createSyncCover(directory, COVER_INTERVAL_MS);

  let inFlight = 0;
  let slotFreed: (() => void) | undefined;
  const publishesDone = new Set<Promise<void>>();
  const verdicts = createVerdicts({ publisher, maxEventBytes: deps.limits.maxBytes, log, metrics });
  const routed = createRoutedLog({ jsm: deps.jsm, publisher, intervalMs: ROUTED_FLUSH_MS, log });
  const dropped = createDroppedDeliveries({ publisher, ops: deps.ops, metrics, log, maxQueued: deps.maxQueued ?? MAX_QUEUED_PER_ENDPOINT, attemptLog: deps.attemptLog });
  const keyedBound = createKeyedQueueBound({ jsm: deps.jsm, shards: deps.shards, maxQueued: deps.maxQueued ?? MAX_QUEUED_PER_ENDPOINT, log });
  // Issue 21: deliveries that may be stored after a later event's are marked for the ordering gates.
  const marks = createLateMarks({ publisher, jsm: deps.jsm, maxQueued: deps.maxQueued ?? MAX_QUEUED_PER_ENDPOINT, log });

  // Messages waiting for their verdict, with when they arrived: one sweep keeps the long waits alive.
  const waiting = new Map<JsMsg, number>();
  const keepAlive = setInterval(() => {
    const before = performance.now() - KEEP_ALIVE_MS;
    for (const [m, since] of waiting) if (since < before) { m.working(); waiting.set(m, performance.now()); }
  }, KEEP_ALIVE_MS / 2);
  keepAlive.unref();

  // Fan-outs and rejections (a publish to REJECTED) hold slots until JetStream answers; stop() waits for them.
  const track = (m: JsMsg, work: Promise<void>, slots: number): Promise<void> => {
    inFlight += slots;
    waiting.set(m, performance.now());
    const done = work.finally(() => {
      inFlight -= slots;
      waiting.delete(m);
      publishesDone.delete(done);
      slotFreed?.();
    });
    publishesDone.add(done);
    return done;
  };
  const reject = (m: JsMsg, reason: RejectionReason, detail: string) => track(m, verdicts.reject(m, reason, detail), 1);

  /** Fan out, or reject what throws while checking, matching or encoding: its own doing, a retry would throw again. */
  const tryFanOut = (m: JsMsg, stored?: ReadonlySet<string>): Promise<void> | undefined => {
    try {
      return fanOut(m, stored);
    } catch (e) {
      return reject(m, RejectionReason.RouteFailed, exceptionDetail(e));
    }
  };

  /** An event delivered again: what did its earlier deliveries store? */
  const reroute = async (m: JsMsg): Promise<void> => {
    const known = await routed.lookup(m.seq).catch((e: unknown) => {
      log.warn('could not read what an earlier routing stored; routing the whole fan-out', { seq: m.seq, reason: describe(e) });
      return undefined;
    });
    // Its whole fan-out is stored: nothing to publish, and never a rejection (issue 17).
    if (known?.done) return void m.ack();
    // Back this often with nothing stored: the router kept failing or stopping on it. No further try.
    // With part of it stored, the failures were NATS's: the rest is tried while deliveries are left.
    const last = known ? ROUTER_MAX_DELIVER - 2 : LAST_ROUTING_DELIVERY;
    if (m.info.deliveryCount > last) {
      await reject(m, RejectionReason.RouteFailed, `no verdict after ${m.info.deliveryCount - 1} deliveries`);
      return;
    }
    await tryFanOut(m, known?.stored);
  };

  /** The tenant as the subject names it (events.<tenant>.<event>); a malformed one is rejected when routed. */
  const tenantOf = (m: JsMsg): string => m.subject.split('.', 3)[1] ?? '';
  // Every event leaves with a verdict: acked (routed), rejected (stored in REJECTED, terminated), or
  // handed back with nak(delay) when the failure was not its fault.
  const route = (m: JsMsg): void => {
    metrics.eventsReceived.inc();
    verdicts.arrived(m.seq);
    const tenant = tenantOf(m);
    const queue = held.get(tenant);
    if (queue) {
      hold(tenant, queue, m);
      if (queue.why !== PENDING && queue.events.length > TENANT_DRAIN_AFTER) drains.start(tenant);
      // Past its share of the window (no drain started), its oldest waiting event goes: the window stays the other tenants'.
      if (queue.events.length > TENANT_DEFERRED && queue.why !== PENDING) release(tenant);
      return;
    }
    const why = waitFor(tenant);
    if (!why) return void routeNow(m);
    const fresh = { events: [], why, armed: false };
    held.set(tenant, fresh);
    hold(tenant, fresh, m);
    arm(tenant, fresh);
  };
  // Events of a tenant that must wait, oldest first: over its pending bound (PENDING), or one of its limits
  // (src/router/tenant-share.ts). Routed in order as the reason goes away.
  interface Held { events: JsMsg[]; why: Why; armed: boolean }
  type Why = typeof PENDING | OverLimit;
  const PENDING = 'pending';
  const held = new Map<string, Held>();
  const timers = new Set<NodeJS.Timeout>();
  const waitFor = (tenant: string): Why | undefined => (fair.pending(tenant) >= TENANT_PENDING ? PENDING : share.check(tenant));
  const hold = (tenant: string, queue: Held, m: JsMsg): void => {
    queue.events.push(m);
    waiting.set(m, performance.now());
    if (queue.why === PENDING) metrics.eventsHeld.inc();
    else metrics.tenantLimitHits.inc({ limit: LIMIT_NAMES[queue.why.limit] });
  };
  /** Release the tenant's events once its reason may have gone: its fan-outs drained, or a limit's wait. */
  const arm = (tenant: string, queue: Held): void => {
    if (queue.armed || stopping) return;
    queue.armed = true;
    const go = () => { queue.armed = false; release(tenant); };
    const { why } = queue;
    if (why === PENDING) return fair.whenBelow(tenant, TENANT_PENDING, go);
    notice(tenant, why, queue.events.length);
    const timer = setTimeout(() => { timers.delete(timer); go(); }, why.retryMs);
    timers.add(timer);
  };
  const release = (tenant: string): void => {
    const queue = held.get(tenant);
    if (!queue || stopping) return;
    while (queue.events.length > 0) {
      const why = waitFor(tenant);
      if (why && (why === PENDING || queue.events.length <= TENANT_DEFERRED)) {
        queue.why = why;
        return arm(tenant, queue);
      }
      const m = queue.events.shift()!;
      waiting.delete(m);
      routeNow(m);
    }
    held.delete(tenant);
  };
  // One line per tenant and limit a minute, naming the limit: the operator's cue to raise it, or to ask.
  const noticed = new Map<string, number>();
  const notice = (tenant: string, why: OverLimit, waitingNow: number | undefined): void => {
    const key = `${tenant} ${why.limit}`;
    const minute = Math.floor(Date.now() / 60_000);
    if (noticed.get(key) === minute) return;
    if (noticed.size >= 10_000) noticed.clear();
    noticed.set(key, minute);
    log.warn('tenant over its limit: its events wait to be routed', { tenant, limit: LIMIT_NAMES[why.limit], value: why.value, waiting: waitingNow, drained: waitingNow === undefined });
  };
  // Every event is decided after a read of the drain records that started after it came (drains.ts): routed
  // here, acked as a drain's, or parked (in order, with its tenant's later events) until its record moves.
  const parked = new Map<string, JsMsg[]>();
  // Arrived, waiting for that read: stop() hands them back itself, since the read may end only after the
  // connection has closed, and a nak then would never reach the server (the event would wait out its ack wait).
  const undecided = new Set<JsMsg>();
  // What a stopping router still holds goes back to the server (see HAND_BACK_DELAY_MS).
  const handBack = (m: JsMsg): void => { waiting.delete(m); m.nak(HAND_BACK_DELAY_MS); };
  // Direct delivery's window (src/delivery/direct-window.ts): an event waits until this process knows the
  // window for its time; one that waits keeps every later one behind it, so none overtakes another.
  let windowWait: Promise<void> | undefined;
  const windowKnown = (m: JsMsg): Promise<void> | undefined => {
    const w = deps.window;
    if (!w || (!windowWait && w.direct(storedAt(m)) !== undefined)) return undefined;
    const wait = (windowWait ?? Promise.resolve()).then(() => w.known(storedAt(m)));
    windowWait = wait;
    void wait.finally(() => { if (windowWait === wait) windowWait = undefined; });
    return wait;
  };
  const arrive = (m: JsMsg): void => {
    waiting.set(m, performance.now());
    undecided.add(m);
    const decideSynced = () => void drains.synced().then(() => { if (undecided.delete(m)) decide(m); });
    const known = windowKnown(m);
    if (known) void known.then(decideSynced);
    else decideSynced();
  };
  const decide = (m: JsMsg): void => {
    if (stopping) return handBack(m);
    const tenant = tenantOf(m);
    const queue = parked.get(tenant);
    if (queue) return void queue.push(m);
    switch (drains.decide(tenant, m.seq)) {
      case 'route':
        waiting.delete(m);
        return route(m);
      case 'skip':
        waiting.delete(m);
        metrics.eventsReceived.inc();
        metrics.eventsDrained.inc();
        verdicts.arrived(m.seq);
        return m.ack();
      case 'hold':
        parked.set(tenant, [m]);
    }
  };
  const redecide = (tenant: string): void => {
    const queue = parked.get(tenant);
    if (!queue) return;
    parked.delete(tenant);
    for (const m of queue) decide(m);
  };
  const routeNow = (m: JsMsg): Promise<void> | undefined => {
    // Traced: a span in the producer's trace (or the event's own), carried on in every delivery message
    // and named by a direct attempt from the event's webhook-id (src/telemetry/event-trace.ts).
    if (tracing.on) return traceRouting(m, ROUTER_CONSUMER, deps.webhookIds.encode({ seq: m.seq, ms: epochMs }), () => routeOnce(m));
    return routeOnce(m);
  };
  const routeOnce = (m: JsMsg): Promise<void> | undefined => {
    if (m.info.deliveryCount > 1) return track(m, reroute(m), 1);
    return tryFanOut(m);
  };

  /**
   * Stored in direct delivery's window (since ≤ t < until): its endpoints without ordering read it from its
   * partition stream. Known by now (arrive waited); were it not, queued to all: a duplicate, never a loss.
   */
  const readDirectly = (m: JsMsg) => deps.window?.direct(storedAt(m)) ?? false;
  const targetsOf = (tenant: TenantId, type: EventName, m: JsMsg): EndpointState[] => {
    const out: EndpointState[] = [];
    // Only ordered endpoints' deliveries are queued here, and those of an endpoint switched back to no
    // ordering of events stored before the switch (`keyedUntil`): still in key order, its direct consumer
    // starting after them.
    const orderedOnly = readDirectly(m);
    for (const e of directory.activeFor(tenant)) {
      if (!matchesAny(e.events, type)) continue;
      if (!orderedOnly || e.ordering === Ordering.Key) out.push(e);
      else if (m.seq <= (e.keyedUntil ?? 0)) out.push({ ...e, ordering: Ordering.Key });
    }
    return out;
  };
  /**
   * How many of the endpoints that take the event targetsOf leaves to their direct consumer: the router's
   * span counts them with the queued ones, so the trace says where the event went whichever path takes it.
   */
  const directTakers = (tenant: TenantId, type: EventName, m: JsMsg): number => {
    if (!readDirectly(m)) return 0;
    let n = 0;
    for (const e of directory.activeFor(tenant)) {
      if (matchesAny(e.events, type) && e.ordering !== Ordering.Key && m.seq > (e.keyedUntil ?? 0)) n++;
    }
    return n;
  };

  /** `stored`: endpoints (`<id>@<version>`) an earlier delivery of this event stored already. */
  const fanOut = (m: JsMsg, stored?: ReadonlySet<string>): Promise<void> | undefined => {
    const parsed = parseEvent(m.subject, m.data, deps.limits);
    if (!parsed.ok) return reject(m, parsed.reason, parsed.detail);
    const keyed = eventOrdering(m.headers, parsed.tenant, parsed.type, parsed.data);
    if (!keyed.ok) return reject(m, RejectionReason.InvalidOrderingKey, keyed.detail);
    progress.keyed(parsed.tenant, m.seq, keyed.ordering?.token ?? null);
    const seen = directory.lastSeq();
    const key = (e: EndpointState) => `${e.id}@${e.version}`;
    const targets = targetsOf(parsed.tenant, parsed.type, m).filter((e) => !stored?.has(key(e)));
    // What this delivery of the event has stored, for a retry after a partial failure.
    const storedNow = new Set(stored);
    // Where each delivery was stored, for the erasure index.
    const queuedAt: [string, number, string][] = [];
    // Made once, and only for an event with a delivery or an index entry: with direct delivery most events
    // have neither here (their endpoints read them from the partition streams).
    let webhookIdMade: string | undefined;
    const webhookId = () => (webhookIdMade ??= deps.webhookIds.encode({ seq: m.seq, ms: epochMs }));
    const indexed = () => deps.erasureIndex?.record({ tenant: parsed.tenant, data: parsed.data, eventsSeq: m.seq, webhookId, orderingKey: keyed.ordering?.key, deliveries: queuedAt });
    const eventSeq = String(m.seq);
    // Stored before the event's ack: the marks of its deliveries, and for a retry, a mark after what its
    // earlier routing stored (whose own marks may never have been stored).
    const marked: Promise<void>[] = [...new Set([...stored ?? []].map((k) => deliveryAddress(k.slice(0, k.lastIndexOf('@')), deps.shards).stream))]
      .map((stream) => marks.mark(stream));
    // Hashed once for the whole fan-out (a producer's id), not once per endpoint; not at all without one.
    let msgIdPrefixMade: string | undefined;
    const msgIdPrefix = () => (msgIdPrefixMade ??= fanOutMsgIdPrefix(parsed.tenant, m.headers?.get(MSG_ID_HEADER) || undefined, webhookId()));
    // Encoded once for the whole fan-out (and its catch-up), not once per target; not at all without one.
    let body: Uint8Array | string | Promise<Uint8Array> | undefined;
    const bodyOrReject = (): typeof body => {
      if (body !== undefined) return body;
      const encoded = encodeDelivery(parsed.type, parsed.data, DELIVERY_MAX_BODY);
      if (!encoded.ok) { void reject(m, encoded.reason, encoded.detail); return undefined; }
      return (body = deps.bodies ? deps.bodies.seal(parsed.tenant, parsed.data, encoded.body) : encoded.body);
    };
    // Every header is built before the first publish, so an exception cannot leave a fan-out half sent.
    // `late`: a catch-up, stored after whatever was routed meanwhile.
    const publishTo = async (list: EndpointState[], restored?: ReadonlySet<string>, late = false): Promise<void> => {
      // Stamped once per publish round: every earlier event of the tenant past it is handled by now.
      let after: number | undefined;
      const barrier = () => (after ??= drainBarrier.get(m) ?? progress.barrier(parsed.tenant, m.seq, keyed.ordering!.token));
      // Sealed at once when its keys are in memory; else after them, still in event order (data-keys.ts).
      const payload = body instanceof Promise ? await body : body!;
      // An ordered endpoint's keyed delivery: the key's earlier events here are stored (or handed back) first,
      // so its barrier need not wait for the router's progress over every tenant's (tenant-progress.ts).
      if (keyed.ordering && !drainBarrier.has(m) && list.some((e) => e.ordering === Ordering.Key)) {
        const earlier = progress.settled(parsed.tenant, m.seq, keyed.ordering.token);
        if (earlier) await earlier;
      }
      // The headers every delivery of the event carries, written once (src/nats/header-block.ts).
      const common = new HeaderBlock();
      common.add(DeliveryHeader.WebhookId, webhookId());
      common.add(DeliveryHeader.Event, parsed.type);
      common.add(DeliveryHeader.Tenant, parsed.tenant);
      common.add(DeliveryHeader.EventSeq, eventSeq);
      if (tracing.on) writeContext((name, value) => common.add(name, value));
      const prepared = list.map((endpoint) => {
        const h = common.copy();
        h.add(DeliveryHeader.Endpoint, endpoint.id);
        h.add(DeliveryHeader.EndpointVersion, String(endpoint.version));
        // A restored endpoint's catch-up must not be dropped as a duplicate of the stale first copy
        // (which the delivery role drops as routed before the restore): its id names the new life.
        const id = `${msgIdPrefix()}.${endpoint.id}`;
        h.add(MSG_ID_HEADER, restored?.has(endpoint.id) ? `${id}.${endpoint.activeSince}` : id);
        const to = deliverySubject(endpoint, deps.shards, keyed.ordering, h, keyedBound, barrier);
        return { subject: to.subject, headers: to.h.encoded(), full: to.full, bounded: to.bounded };
      });
      // Each store is told to the marks as it is answered, in the order JetStream stored them.
      const results = await Promise.allSettled(prepared.map(({ subject, headers, full }) => (full ? Promise.reject(full) : fair.publish(parsed.tenant, subject, payload, headers).then((at) => {
        const mark = marks.stored(at, m.seq, late);
        if (mark) marked.push(mark);
        return at;
      }))));
      const refused: Promise<void>[] = [];
      let failed: unknown;
      results.forEach((r, i) => {
        const endpoint = list[i]!;
        if (prepared[i]!.bounded) keyedBound.answered(endpoint.id, r.status === 'fulfilled');
        if (r.status === 'fulfilled') { storedNow.add(key(endpoint)); queuedAt.push([r.value.stream, r.value.seq, endpoint.id]); }
        else if (r.reason instanceof PublishRejectedError && r.reason.code === QUEUE_FULL_CODE) {
          // Its queue is full: recorded as dropped, never retried (src/router/dropped.ts).
          storedNow.add(key(endpoint));
          refused.push(dropped.record(endpoint, { webhookId: webhookId(), event: parsed.type }));
        } else failed ??= r.reason;
      });
      await Promise.all(refused);
      if (failed !== undefined) throw failed;
    };
    if (targets.length > 0 && bodyOrReject() === undefined) return undefined;
    // One no endpoint of it takes here may still be read directly, whose endpoints refuse it unsent: it is
    // written down as refused here, where every event passes (only a large one can outgrow its delivery).
    if (targets.length === 0 && readDirectly(m) && mayOutgrow(m.data.length, DELIVERY_MAX_BODY) && bodyOrReject() === undefined) return undefined;
    const first = targets.length > 0 ? publishTo(targets) : undefined;
    // Any sync that starts from now on started after the event was read.
    const covered = cover.after();

    const settle = async (): Promise<void> => {
      let enqueued = targets.length;
      try {
        await Promise.all([first, covered]);
        if (directory.lastSeq() !== seen) {
          // The directory applied endpoint writes since the first routing: add what it missed.
          const sent = new Map(targets.map((e) => [e.id, e.version]));
          const restored = new Set<string>();
          const missed = targetsOf(parsed.tenant, parsed.type, m).filter((e) => {
            const version = sent.get(e.id);
            if (version === undefined) return true;
            // Routed from a view older than the endpoint's latest restore: that copy is dropped on delivery.
            if (e.activeSince !== undefined && version < e.activeSince) { restored.add(e.id); return true; }
            return false;
          });
          if (missed.length > 0) {
            if (bodyOrReject() === undefined) return;
            // Rare (the directory had not applied a write yet); worth a line, not on any hot path.
            log.info('event routed to endpoints its first routing missed', { seq: m.seq, endpoints: missed.map((e) => e.id).join(',') });
            await publishTo(missed, restored, true);
            enqueued += missed.length;
          }
        }
        // Its deliveries are all in their queues: the next event of its key here may be published.
        progress.stored(m.seq);
        drainStored.get(m)?.();
        await indexed();
        await Promise.all(marked);
      } catch (e) {
        if (isEventsFault(e)) return verdicts.reject(m, RejectionReason.TooLarge, describe(e));
        // NATS's trouble (a publish, or the directory sync), not the event's: it comes back after a delay,
        // and then publishes only what this delivery did not store (written down first, with where it is).
        await indexed()?.catch(() => {});
        await routed.partial(m.seq, storedNow);
        verdicts.retry(m, `fan-out failed: ${describe(e)}`);
        return;
      }
      if (enqueued > 0) { metrics.deliveriesEnqueued.inc({}, enqueued); backlog.routed(parsed.tenant, enqueued); }
      if (tracing.on) noteOnActiveSpan({ [Attr.Deliveries]: enqueued + directTakers(parsed.tenant, parsed.type, m) });
      routed.done(m);
    };
    return track(m, settle(), Math.max(1, targets.length));
  };

  // Routing never waits for the directory (but when it knows it is behind), so events are routed as
  // they come off the consumer. (Issue 5 had a pump stamp arrivals so one sync covered a batch; issue 13
  // moved the sync off the path altogether: cover.ts.)
  const loop = (async () => {
    for await (const m of messages) {
      // Before anything can hand it back: an event handed back stays unfinished for its tenant's barrier.
      progress.received(m, tenantOf(m));
      try {
        // A directory that knows it is behind (its consumer said more was pending) is caught up first,
        // so it does not route from a view it knows is old; otherwise the covering sync follows routing.
        if (directory.behind()) await directory.sync();
        arrive(m);
        while (inFlight >= MAX_ROUTING) await new Promise<void>((r) => (slotFreed = r));
      } catch (e) {
        // route() catches its own exceptions: this is the directory sync, NATS's trouble, not the event's.
        verdicts.retry(m, `routing failed: ${describe(e)}`);
      }
    }
  })();

  return {
    done: loop,
    waiting: () => verdicts.waiting(),
    async stop() {
      untrackLeader?.();
      // close() unsubscribes at once: what is still on its way to this process would be dropped and wait
      // out its ack wait (30 s). Drained first, it arrives, and is handed back below. A NATS that is away
      // answers no drain: the stop goes on after a second.
      const sub = subscriptionOf(messages);
      if (sub) await Promise.race([sub.drain().catch(() => {}), sleep(SUBSCRIPTION_DRAIN_MS, undefined, { ref: false })]);
      await messages.close();
      await loop;
      // Events not routed yet are handed back: another router, or this one started again, takes them
      // within a second rather than after their ack wait (30 s).
      stopping = true;
      undecided.forEach(handBack);
      undecided.clear();
      await drains.stop();
      for (const queue of parked.values()) queue.forEach(handBack);
      parked.clear();
      for (const queue of held.values()) queue.events.forEach(handBack);
      held.clear();
      for (const timer of timers) clearTimeout(timer);
      backlog.stop();
      // A mark NATS keeps refusing gives up: its event comes back, and its retry marks again.
      marks.close();
      await Promise.allSettled([...publishesDone]);
      await routed.flush();
      clearInterval(keepAlive);
      cover.stop();
    },
  };
}
