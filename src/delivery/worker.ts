// The delivery role: one durable consumer per active endpoint, each with its own pull loop, so a slow
// or dead endpoint only ever occupies its own in-flight slots (max_ack_pending). A 2xx acks; a failure
// is recorded and left unacked, and JetStream's backoff brings the next attempt; when the last allowed
// attempt fails, a plain nak makes the server raise the max-deliveries advisory at once (dead letter).
// Issue 10: a 429/503 Retry-After pushes the next attempt later (nak with a computed delay), 429s shrink the
// endpoint's concurrency in this process (AIMD), and a rate-limited endpoint keeps each consumer slot for a
// second after its attempt, so the server's max_ack_pending enforces the limit across every instance.
import type { ConsumerConfig, ConsumerMessages, JetStreamClient, JetStreamManager, JsMsg } from '@nats-io/jetstream';
import { JetStreamApiCodes } from '@nats-io/jetstream';
import { DeliveryHeader, deliveryAddress, deliveryStream, endpointConsumer } from '../../streams/deliveries.ts';
import { attemptSubject, type AttemptRecord } from '../../streams/attempts.ts';
import { ensureConsumer, isApiError } from '../../streams/ensure.ts';
import { EndpointStatus, liveSecrets, type EndpointState } from '../domain/endpoint.ts';
import type { EndpointId } from '../domain/ids.ts';
import { signingKeyFor, type SigningKey } from '../domain/signature.ts';
import type { EndpointDirectory } from '../endpoints/directory.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { describe } from '../errors.ts';
import type { AttemptOutcome } from './http-sender.ts';
import type { AckedPublisher } from '../nats/acked-publisher.ts';
import { deliveryHeaders } from './sign-request.ts';
import type { EndpointHealthHook } from './endpoint-health.ts';
import { honoursRetryAfter, parseRetryAfter } from './retry-after.ts';
import { planNextAttempt } from './next-attempt.ts';
import { createConcurrencyLimit, type ConcurrencyLimit } from './concurrency.ts';

export interface Sender {
  send(req: { url: string; headers: Record<string, string>; body: string | Buffer }): Promise<AttemptOutcome>;
}

export interface SecretOpener {
  /** Throws when the value was sealed for another endpoint (issue 8). */
  open(sealed: string, endpointId: EndpointId): string;
}

export interface DeliveryOptions {
  shards: number;
  retrySchedule: number[];
  maxInFlight: number;
  /** HOOKSTREAM_REPLICAS for the endpoints' consumers; absent leaves existing consumers as they are. */
  replicas?: number;
}

export interface Delivery {
  /** Endpoints with a running pull loop in this process. */
  running(): number;
  stop(): Promise<void>;
}

/** A message this process holds: waiting for a slot, in its attempt, or keeping a rate-limit slot. */
interface InFlight {
  msg: JsMsg;
  touched: number;
  wait: number;
}

/** One endpoint's attempts in this process: how many may run at once, how many do, and who waits. */
interface Lane {
  id: EndpointId;
  limit: ConcurrencyLimit;
  running: number;
  waiting: InFlight[];
  closed: boolean;
}

/**
 * How long a rate-limited endpoint's slot stays taken after its attempt ended. Counted from the end (the
 * answer came back, so the request had arrived), not from the send: the receiver, not only the sender,
 * never sees more than the limit in any second, whatever the network's jitter.
 */
export const RATE_LIMIT_HOLD_MS = 1000;

/**
 * The sweep's tick: a quarter of the shortest wait (backoff[0]), at most 250 ms, so a held message is
 * marked working twice per wait even when the event loop runs late; messages now wait for a slot or keep
 * one for a second, far longer than a short schedule's first step.
 */
const sweepEvery = (firstStep: number) => Math.max(20, Math.min(250, Math.floor(firstStep / 4)));

const CONSUMER_SETUP_CONCURRENCY = 32;
const RECONCILE_RETRY_MS = 2000;
const PULL_EXPIRES_MS = 120_000;
const PULL_HEARTBEAT_MS = 30_000;

/**
 * A delivery routed from a view of the endpoint older than its latest restore, hence from before the
 * delete that preceded it (the router only routes to active endpoints). Sequences of the one ENDPOINTS
 * stream, so no clock is compared. A replay is an operator's decision taken after the restore: delivered.
 * A message without the header (routed by an older version) is delivered as before.
 */
export function routedBeforeRestore(state: Pick<EndpointState, 'activeSince'>, m: Pick<JsMsg, 'headers'>): boolean {
  if (state.activeSince === undefined || !m.headers || m.headers.has(DeliveryHeader.Replay)) return false;
  const routed = Number(m.headers.get(DeliveryHeader.EndpointVersion));
  return Number.isSafeInteger(routed) && routed > 0 && routed < state.activeSince;
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
}): Promise<Delivery> {
  const { js, jsm, directory, sender, options, log, metrics } = deps;
  const maxDeliver = options.retrySchedule.length + 1;
  const loops = new Map<EndpointId, { messages: ConsumerMessages; done: Promise<void>; lane: Lane }>();
  const inFlight = new Set<InFlight>();
  const attempts = new Set<Promise<void>>();
  let stopping = false;

  // Opening a sealed secret costs a libsodium call; endpoints keep theirs for the life of the process.
  // Keyed by endpoint and sealed value: a value copied to another endpoint must meet open()'s binding
  // check there, not a cache hit.
  const keyCache = new Map<string, SigningKey>();
  const keysFor = (state: EndpointState, now: number) =>
    liveSecrets(state, now).map((s) => {
      const cacheKey = `${state.id} ${s.sealed}`;
      let key = keyCache.get(cacheKey);
      if (!key) keyCache.set(cacheKey, (key = signingKeyFor(state.signatureScheme, deps.secrets.open(s.sealed, state.id))));
      return key;
    });

  // Acks of one event-loop turn go out together: nats.js writes its outbound buffer to the socket once per
  // microtask checkpoint, and every HTTP answer completes in an I/O callback of its own, so acking at once
  // cost one socket write per delivery (issue 5). setImmediate runs after the turn's I/O callbacks.
  let acks: JsMsg[] = [];
  const flushAcks = () => {
    const batch = acks;
    acks = [];
    for (const m of batch) m.ack();
  };
  const ackSoon = (m: JsMsg) => {
    if (acks.push(m) === 1) setImmediate(flushAcks);
  };

  /** How long the server waits on the n-th delivery before redelivering: the backoff step. */
  const waitFor = (deliveryCount: number) => options.retrySchedule[Math.min(deliveryCount, maxDeliver - 1) - 1]!;

  // One sweep for all attempts: an attempt that outlives its wait would otherwise be delivered again
  // while still running (jetstream-2.9.md: working() resets the wait to the current step).
  const sweep = setInterval(() => {
    const now = Date.now();
    for (const f of inFlight) {
      if (now - f.touched > f.wait / 2) {
        f.msg.working();
        f.touched = now;
      }
    }
  }, sweepEvery(options.retrySchedule[0]!));
  sweep.unref();

  async function recordFailure(record: AttemptRecord): Promise<void> {
    try {
      await deps.publisher.publish(attemptSubject(record.endpoint, record.webhook_id), JSON.stringify(record));
    } catch (e) {
      log.warn('could not record attempt', { endpoint: record.endpoint, webhook_id: record.webhook_id, reason: describe(e) });
    }
  }

  const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
  /** Keep a rate-limited slot until a second after the attempt ended (the sweep keeps the message alive). */
  const holdSlot = async (endedAt: number) => {
    const left = endedAt + RATE_LIMIT_HOLD_MS - Date.now();
    if (left > 0) await sleep(left);
  };

  function start(lane: Lane, tracked: InFlight): void {
    lane.running++;
    let released = false;
    // The slot under the lane's limit is given back when the HTTP attempt ends, before any rate-limit hold.
    const release = () => {
      if (released) return;
      released = true;
      lane.running--;
      pump(lane);
    };
    const p = attempt(lane, tracked, release).catch((e: unknown) => {
      log.error('delivery attempt crashed; it will be retried', { endpoint: lane.id, seq: tracked.msg.seq, reason: describe(e) });
    }).finally(() => {
      inFlight.delete(tracked);
      release();
    });
    attempts.add(p);
    void p.finally(() => attempts.delete(p));
  }

  function pump(lane: Lane): void {
    while (!lane.closed && lane.running < lane.limit.current && lane.waiting.length > 0) start(lane, lane.waiting.shift()!);
  }

  async function attempt(lane: Lane, tracked: InFlight, release: () => void): Promise<void> {
    const endpointId = lane.id;
    const m = tracked.msg;
    const state = directory.get(endpointId);
    if (state?.status === EndpointStatus.Disabled || deps.health?.holds(endpointId)) {
      // Disabled (issue 10): held in its queue, not acked; the consumer stops pulling and hands it out
      // again after a restore.
      return;
    }
    if (!state || state.status !== EndpointStatus.Active) {
      m.ack(); // a deleted endpoint gets nothing more
      return;
    }
    if (routedBeforeRestore(state, m)) {
      // The router routed it before it learned of a delete, and it was stored after the delete's purge.
      log.info('delivery routed before the endpoint was deleted; dropped', {
        endpoint: endpointId, webhook_id: m.headers?.get(DeliveryHeader.WebhookId), seq: m.seq,
      });
      m.ack();
      return;
    }
    const webhookId = m.headers?.get(DeliveryHeader.WebhookId);
    const event = m.headers?.get(DeliveryHeader.Event);
    if (!webhookId || !event) {
      log.error('delivery message without webhook-id or event header; dropped', { endpoint: endpointId, seq: m.seq });
      m.term();
      return;
    }
    const n = m.info.deliveryCount;
    const started = Date.now();
    const body = Buffer.from(m.data.buffer, m.data.byteOffset, m.data.byteLength);
    const headers = deliveryHeaders({ webhookId, event, keys: keysFor(state, started), body, now: started });
    // The one rate-limit check of the hot path: endpoints without a limit pay this null test and nothing else.
    const limited = state.rateLimit !== null;
    metrics.attempts.inc({ event });
    const outcome = await sender.send({ url: state.url, headers, body });
    const ended = Date.now();
    deps.health?.onAttemptResult(state, { ok: outcome.ok, status: outcome.status, at: ended, webhookId, event });
    // The limit learns from the answer before the freed slot goes to a waiting message.
    if (outcome.ok) lane.limit.succeeded();
    else if (outcome.status === 429) lane.limit.throttled(started, ended);
    release();
    metrics.attemptSeconds.observe(outcome.durationMs / 1000);
    if (outcome.ok) {
      if (limited) await holdSlot(ended);
      ackSoon(m);
      metrics.acknowledged.inc({ event });
      return;
    }
    inFlight.delete(tracked);
    metrics.failed.inc({ event, kind: outcome.kind });
    const retryAfterMs = honoursRetryAfter(outcome.status) ? parseRetryAfter(outcome.retryAfter, ended) : undefined;
    const last = n >= maxDeliver;
    // Not the last attempt: the schedule's next step, or later when Retry-After or the rate limit's slot
    // hold asks for it; still one delivery of max_deliver, so it counts as one attempt.
    const plan = last ? undefined : planNextAttempt({
      now: ended, touched: tracked.touched, step: tracked.wait, firstStep: options.retrySchedule[0]!,
      retryAfterMs, floorMs: limited ? RATE_LIMIT_HOLD_MS : undefined,
    });
    if (plan?.action === 'working') m.working();
    else if (plan?.action === 'nak') m.nak(plan.delayMs);
    log.info('delivery attempt failed', {
      endpoint: endpointId, tenant: state.tenant, webhook_id: webhookId, event, attempt: n,
      status: outcome.status, reason: outcome.error, final: last,
    });
    await recordFailure({
      v: 1, endpoint: endpointId, webhook_id: webhookId, event, attempt: n, at: new Date(started).toISOString(),
      duration_ms: outcome.durationMs, status: outcome.status, error: outcome.error,
      next_attempt_at: plan ? new Date(plan.at).toISOString() : null,
      ...(retryAfterMs !== undefined ? { retry_after_ms: retryAfterMs } : {}),
      ...(plan && plan.by !== 'schedule' ? { next_attempt_by: plan.by } : {}),
    });
    if (last) {
      metrics.dead.inc({ event });
      // The nak frees the consumer slot at once: a rate-limited endpoint keeps it its second first.
      if (limited) {
        m.working();
        tracked.touched = Date.now();
        inFlight.add(tracked);
        await holdSlot(ended);
      }
      m.nak(); // past max_deliver: the server raises the max-deliveries advisory now, not after another wait
    }
    // Otherwise left unacked (or nak'd with a delay) on purpose: the consumer's backoff brings the next attempt.
  }

  function run(lane: Lane, messages: ConsumerMessages): Promise<void> {
    return (async () => {
      // Never blocks: a message the lane's limit holds back waits in lane.waiting, where the sweep keeps
      // it alive, rather than in the client's buffer where its ack wait would run out and cost a delivery.
      for await (const m of messages) {
        const tracked: InFlight = { msg: m, touched: Date.now(), wait: waitFor(m.info.deliveryCount) };
        inFlight.add(tracked);
        if (lane.running < lane.limit.current) start(lane, tracked);
        else lane.waiting.push(tracked);
      }
    })();
  }

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
    // A lost pull is still noticed after two missed heartbeats (60 s) and re-issued by the client.
    const messages = await consumer.consume({ max_messages: options.maxInFlight, expires: PULL_EXPIRES_MS, idle_heartbeat: PULL_HEARTBEAT_MS });
    const lane: Lane = { id: state.id, limit: createConcurrencyLimit(options.maxInFlight), running: 0, waiting: [], closed: false };
    loops.set(state.id, { messages, lane, done: run(lane, messages) });
  }

  async function stopLoop(id: EndpointId): Promise<void> {
    const loop = loops.get(id);
    if (!loop) return;
    loops.delete(id);
    await loop.messages.close();
    await loop.done;
    // Messages that never got a slot are let go: the server hands them out again after their ack wait.
    loop.lane.closed = true;
    for (const t of loop.lane.waiting) inFlight.delete(t);
    loop.lane.waiting.length = 0;
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
  log.info('delivery started', { endpoints: loops.size });

  return {
    running: () => loops.size,
    async stop() {
      stopping = true;
      unsubscribe();
      await Promise.allSettled([...pending]);
      await Promise.all([...loops.keys()].map(stopLoop));
      // In-flight attempts finish (each is bounded by the attempt timeout) so none is cut mid-POST.
      await Promise.allSettled([...attempts]);
      flushAcks();
      clearInterval(sweep);
    },
  };
}
