// The delivery role: one durable consumer per active endpoint, each with its own pull loop, so a slow
// or dead endpoint only ever occupies its own in-flight slots (max_ack_pending). A 2xx acks; a failure
// is recorded and left unacked, and JetStream's backoff brings the next attempt; when the last allowed
// attempt fails, a plain nak makes the server raise the max-deliveries advisory at once (dead letter).
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

interface InFlight {
  msg: JsMsg;
  touched: number;
  wait: number;
}

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
  const loops = new Map<EndpointId, { messages: ConsumerMessages; done: Promise<void> }>();
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
  }, 250);
  sweep.unref();

  async function recordFailure(record: AttemptRecord): Promise<void> {
    try {
      await deps.publisher.publish(attemptSubject(record.endpoint, record.webhook_id), JSON.stringify(record));
    } catch (e) {
      log.warn('could not record attempt', { endpoint: record.endpoint, webhook_id: record.webhook_id, reason: describe(e) });
    }
  }

  async function attempt(endpointId: EndpointId, m: JsMsg): Promise<void> {
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
    const tracked: InFlight = { msg: m, touched: started, wait: waitFor(n) };
    inFlight.add(tracked);
    metrics.attempts.inc({ event });
    let outcome: AttemptOutcome;
    try {
      outcome = await sender.send({ url: state.url, headers, body });
    } finally {
      inFlight.delete(tracked);
    }
    deps.health?.onAttemptResult(state, { ok: outcome.ok, status: outcome.status, at: Date.now(), webhookId, event });
    metrics.attemptSeconds.observe(outcome.durationMs / 1000);
    if (outcome.ok) {
      ackSoon(m);
      metrics.acknowledged.inc({ event });
      return;
    }
    metrics.failed.inc({ event, kind: outcome.kind });
    const last = n >= maxDeliver;
    log.info('delivery attempt failed', {
      endpoint: endpointId, tenant: state.tenant, webhook_id: webhookId, event, attempt: n,
      status: outcome.status, reason: outcome.error, final: last,
    });
    await recordFailure({
      v: 1, endpoint: endpointId, webhook_id: webhookId, event, attempt: n, at: new Date(started).toISOString(),
      duration_ms: outcome.durationMs, status: outcome.status, error: outcome.error,
      next_attempt_at: last ? null : new Date(tracked.touched + tracked.wait).toISOString(),
    });
    if (last) {
      metrics.dead.inc({ event });
      m.nak(); // past max_deliver: the server raises the max-deliveries advisory now, not after another wait
    }
    // Otherwise left unacked on purpose: the consumer's backoff schedules the next attempt.
  }

  function run(endpointId: EndpointId, messages: ConsumerMessages): Promise<void> {
    return (async () => {
      for await (const m of messages) {
        const p = attempt(endpointId, m).catch((e: unknown) => {
          log.error('delivery attempt crashed; it will be retried', { endpoint: endpointId, seq: m.seq, reason: describe(e) });
        });
        attempts.add(p);
        void p.finally(() => attempts.delete(p));
      }
    })();
  }

  async function startLoop(state: EndpointState, known?: ConsumerConfig): Promise<void> {
    if (loops.has(state.id) || stopping) return;
    const address = deliveryAddress(state.id, options.shards);
    await ensureConsumer(jsm, address.stream, endpointConsumer(state.id, {
      shards: options.shards, retrySchedule: options.retrySchedule, maxInFlight: options.maxInFlight, replicas: options.replicas,
    }), known);
    if (loops.has(state.id) || stopping) return;
    const consumer = await js.consumers.get(address.stream, state.id);
    // Long pulls with the longest heartbeat nats.js allows: with 10,000 endpoints, the default 30 s pull and
    // 15 s heartbeat cost ~1,000 messages/s between client and server while nothing happens (issue 5).
    // A lost pull is still noticed after two missed heartbeats (60 s) and re-issued by the client.
    const messages = await consumer.consume({ max_messages: options.maxInFlight, expires: PULL_EXPIRES_MS, idle_heartbeat: PULL_HEARTBEAT_MS });
    loops.set(state.id, { messages, done: run(state.id, messages) });
  }

  async function stopLoop(id: EndpointId): Promise<void> {
    const loop = loops.get(id);
    if (!loop) return;
    loops.delete(id);
    await loop.messages.close();
    await loop.done;
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
    if (previous && previous.status === next.status) return; // url/events/secret changes are read per attempt
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
