// The delivery state of one webhook-id for one endpoint, derived from what the service keeps anyway
// (successes write nothing, so there is no delivery table to read):
//
//   1. the work queue: is a message with this webhook-id still on the endpoint's DELIVERIES subject?
//      (scanned with next-by-subject reads; a work queue holds only unacknowledged messages)
//   2. dead_letters: a row with status `dead`, or `replayed` after an operator's replay
//   3. ATTEMPTS: one record per failed attempt (status or error, next attempt time)
//   4. EVENTS: the webhook-id decrypts to the event's stream sequence (src/domain/webhook-id.ts); the event tells tenant and type, and
//      the router's ack floor tells whether it was routed yet
//   5. with direct delivery (streams/direct.ts), for an event stored since it started, neither queued nor
//      a dead letter, and an endpoint without ordering: the endpoint's consumer of its partition stream, from the event's copy there
//      (src/erasure/partition-copies.ts) against the consumer's delivered sequence and ack floor. That
//      copy counts as queued ("held") until the floor passes it: not handed out yet, or handed out and
//      not acked (a copy acked ahead of an earlier one still held is held until the floor passes it)
//
//   queued, no failure since it was queued       → pending   (waiting, or its first attempt is running)
//   queued, failures since it was queued         → retrying  (next_attempt_at from the last failure;
//                                                   waiting_on retry_after when the endpoint's Retry-After set it)
//   queued, rate-limited endpoint, window full   → pending, waiting_on rate_limit
//   held by the direct consumer, no dead letter  → as queued (pending, retrying, rate_limit; from ATTEMPTS), and
//                                                   pending while its copy or its consumer is not made yet
//   not queued, dead letter `dead`               → dead
//   not queued, dead letter `replayed`           → acknowledged (the replay left the queue alive)
//   not queued, last record a refusal            → dropped   (the endpoint's queue was full, issue 17)
//   not queued, failures recorded                → acknowledged (a later attempt got a 2xx)
//   direct consumer's floor past the copy,
//     nothing failed                             → acknowledged at the first attempt
//   not queued, nothing failed, event routed and
//     the endpoint subscribes to it              → acknowledged at the first attempt
//   event not routed yet and it matches          → pending
//   no trace and the event no longer readable    → unknown
//
// The queue is read before dead_letters: the dead-letter handler stores the record before it deletes the
// message, so a message missing from the queue is always already in dead_letters when we look. A dead
// copy stays in its partition stream, so a dead letter is looked at before the direct consumer.
// The direct consumer's start (it reads from its endpoint's creation or restore on) decides whether it
// reads the copy at all; a copy stored before it is left to the rows after it (the endpoint was created
// after the event).
import type { MikroORM } from '@mikro-orm/postgresql';
import type { JetStreamClient, JetStreamManager, StoredMsg } from '@nats-io/jetstream';
import { ATTEMPTS_STREAM, attemptSubject, type AttemptRecord } from '../../streams/attempts.ts';
import { DeliveryHeader, deliveryAddress, keyedSubjects } from '../../streams/deliveries.ts';
import { directAddress, directConsumerInfo } from '../../streams/direct.ts';
import { EVENTS_STREAM, eventsStart, inDirectWindow, ROUTER_CONSUMER } from '../../streams/events.ts';
import { rateBuckets, rateLimitStream, rateLimitSubject } from '../../streams/rate-limits.ts';
import { isEventName, matchesAny } from '../domain/catalogue.ts';
import { EndpointStatus, Ordering, type EndpointState } from '../domain/endpoint.ts';
import { producerSubject } from '../domain/event-data.ts';
import type { EndpointId } from '../domain/ids.ts';
import type { WebhookIdCodec } from '../domain/webhook-id.ts';
import { readEndpoint } from '../endpoints/read.ts';
import { partitionCopies } from '../erasure/partition-copies.ts';
import { notFound } from '../errors.ts';
import { DeadLetterStatus, findDeliveryDeadLetter, iso } from '../deadletter/store.ts';
import { DeliveryState, WaitingOn, type DeliveryShowOut } from './protocol.ts';

/** Messages of one endpoint's backlog read at most while looking for a webhook-id. */
export const MAX_QUEUE_SCAN = 10_000;

// A plain object, so it passes as the client's MsgRequest type; nats-server answers next_by_subj.
const nextBySubject = (subject: string, seq: number) => ({ seq, next_by_subj: subject });

/** An event as deliveries show reads it from EVENTS; `direct`: stored since direct delivery started. */
/** `direct`: stored in direct delivery's window; `turnedOff`: that window has an end (`until`). */
type ShownEvent = { tenant: string; type: string; seq: number; at: number; direct: boolean; turnedOff: boolean };

/**
 * Where the endpoint's direct consumer is with the event's copy: `held` (not copied yet, no consumer
 * yet, not handed out, or handed out and not acked: `where` says which, for people), or `acked` (its ack
 * floor passed it).
 */
type DirectCopy =
  | { kind: 'held'; where: string; at: { stream: string; seq: number } | null }
  | { kind: 'acked'; stream: string };

export function createDeliveryStates(deps: {
  orm: MikroORM; js: JetStreamClient; jsm: JetStreamManager; shards: number; webhookIds: WebhookIdCodec;
  /** HOOKSTREAM_EVENT_PARTITIONS and HOOKSTREAM_DIRECT_DELIVERY: an endpoint's events may come through its partition stream. */
  partitions?: number | undefined; direct?: boolean | undefined;
}) {
  const { orm, js, jsm } = deps;
  const directPartitions = deps.direct ? deps.partitions ?? 0 : 0;

  /** The plain subject first, then an ordered endpoint's per-key subjects (issue 21). */
  async function findQueued(endpoint: string, webhookId: string): Promise<{ found?: StoredMsg; truncated: boolean }> {
    const { stream, subject } = deliveryAddress(endpoint, deps.shards);
    let scanned = 0;
    for (const s of [subject, keyedSubjects(endpoint, deps.shards)]) {
      for (let seq = 0; ; scanned++) {
        if (scanned >= MAX_QUEUE_SCAN) return { truncated: true };
        const m = await jsm.streams.getMessage(stream, nextBySubject(s, seq));
        if (!m) break;
        if (m.header?.get(DeliveryHeader.WebhookId) === webhookId) return { found: m, truncated: false };
        seq = m.seq + 1;
      }
    }
    return { truncated: false };
  }

  async function history(endpoint: string, webhookId: string): Promise<AttemptRecord[]> {
    const out: AttemptRecord[] = [];
    const subject = attemptSubject(endpoint, webhookId);
    // ATTEMPTS keeps at most 100 records per subject, so this loop is short.
    for (let seq = 0; ;) {
      const m = await jsm.streams.getMessage(ATTEMPTS_STREAM, nextBySubject(subject, seq));
      if (!m) return out;
      try { out.push(m.json<AttemptRecord>()); } catch { /* not a record: skip */ }
      seq = m.seq + 1;
    }
  }

  async function eventOf(webhookId: string): Promise<ShownEvent | undefined> {
    const decoded = deps.webhookIds.decode(webhookId);
    if (!decoded) return undefined;
    const m = await jsm.streams.getMessage(EVENTS_STREAM, { seq: decoded.seq });
    if (!m) return undefined;
    const start = await eventsStart(jsm);
    // A recreated stream reuses sequences: the id names this stream's creation time (or, made before that,
    // the event's own time).
    if (decoded.ms !== start.epochMs && Math.abs(m.time.getTime() - decoded.ms) > 1) return undefined;
    const match = /^events\.([^.]+)\.(.+)$/.exec(producerSubject(m.subject));
    if (!match) return undefined;
    const at = m.time.getTime();
    // As the router decides (targetsOf, src/router/router.ts): stored in direct delivery's window (since
    // the switch, before it was turned off), it queues the event for ordered endpoints only.
    return { tenant: match[1]!, type: match[2]!, seq: decoded.seq, at, direct: inDirectWindow(start, at), turnedOff: start.directUntil !== undefined };
  }

  /**
   * The event's copy as the endpoint's direct consumer has it; undefined when that consumer does not read
   * it: no direct delivery, an event from before it started or not the endpoint's, an ordered endpoint
   * (the router queues its events; a direct consumer it still has is draining what it held before) or a
   * deleted one, a copy stored before the consumer's start (the endpoint was created or restored later).
   */
  async function directCopy(endpoint: EndpointState | undefined, event: ShownEvent | undefined): Promise<DirectCopy | undefined> {
    if (directPartitions === 0 || !endpoint || !event?.direct) return undefined;
    if (endpoint.status === EndpointStatus.Deleted || endpoint.ordering === Ordering.Key) return undefined;
    if (event.tenant !== endpoint.tenant || !isEventName(event.type) || !matchesAny(endpoint.events, event.type)) return undefined;
    const { stream } = directAddress(endpoint, directPartitions);
    const [copy] = await partitionCopies(jsm, directPartitions, event.tenant)!.find([event.seq]);
    const ci = await directConsumerInfo(jsm, endpoint, directPartitions);
    // Its events wait for a delivery instance to make its consumer (from the endpoint's creation on).
    // Direct delivery turned off, a consumer is deleted only once it has handled everything of the window.
    if (!ci && event.turnedOff) return { kind: 'acked', stream };
    if (!ci) return { kind: 'held', where: `waiting for the endpoint's consumer of ${stream} (direct delivery), not made yet`, at: null };
    if (copy === undefined) return { kind: 'held', where: `not yet copied into ${stream} (direct delivery)`, at: null };
    const start = Date.parse(ci.config.opt_start_time ?? '');
    const stored = Number.isFinite(start) ? await jsm.streams.getMessage(stream, { seq: copy }) : undefined;
    if (stored === null || (stored && stored.time.getTime() < start)) return undefined;
    const at = { stream, seq: copy };
    // Holding nothing, the consumer has handled all it handed out (its ack floor may lag behind a skipped end).
    const floor = ci.num_ack_pending === 0 ? Math.max(ci.ack_floor.stream_seq, ci.delivered.stream_seq) : ci.ack_floor.stream_seq;
    if (copy <= floor) return { kind: 'acked', stream };
    return copy > ci.delivered.stream_seq
      ? { kind: 'held', where: `in ${stream} (direct delivery), not yet handed out by the endpoint's consumer`, at }
      : { kind: 'held', where: `handed out by the endpoint's consumer of ${stream} (direct delivery) and not acked yet`, at };
  }

  /** Whether the endpoint's rate-limit window is full now (its tokens, streams/rate-limits.ts). */
  async function windowFull(endpoint: string, perSecond: number): Promise<boolean> {
    let tokens = 0;
    for (const bucket of rateBuckets(perSecond)) {
      const subject = rateLimitSubject(bucket, endpoint);
      const si = await jsm.streams.info(rateLimitStream(bucket), { subjects_filter: subject }).catch(() => undefined);
      tokens += si?.state.subjects?.[subject] ?? 0; // no token stream (yet): nothing to wait on there
    }
    return tokens >= perSecond;
  }

  async function routerAckFloor(): Promise<number> {
    return (await jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER)).ack_floor.stream_seq;
  }

  return {
    async show(webhookId: string, endpointId: string): Promise<DeliveryShowOut> {
      const endpoint = await readEndpoint(js, jsm, endpointId as EndpointId);
      const queue = await findQueued(endpointId, webhookId);
      const dead = await findDeliveryDeadLetter(orm.em.fork(), endpointId, webhookId);
      const records = await history(endpointId, webhookId);
      const event = await eventOf(webhookId);
      // Step 5: only for what is neither queued nor a dead letter.
      const direct = queue.found || queue.truncated || dead ? undefined : await directCopy(endpoint, event);
      const held = queue.found
        ? { where: 'in the work queue', at: { stream: deliveryAddress(endpointId, deps.shards).stream, seq: queue.found.seq } }
        : direct?.kind === 'held' ? direct : undefined;

      const base: DeliveryShowOut = {
        webhook_id: webhookId, endpoint_id: endpointId, state: DeliveryState.Unknown, reason: '',
        tenant: event?.tenant ?? endpoint?.tenant ?? null, event_type: event?.type ?? records[0]?.event ?? null,
        attempts: 0, last_status: null, last_error: null, last_attempt_at: null, next_attempt_at: null, waiting_on: null,
        queued: held?.at ?? null,
        dead_letter: dead ? {
          id: dead.id, status: dead.status, dead_count: dead.dead_count, replay_count: dead.replay_count,
          last_replayed_at: dead.last_replayed_at ? iso(dead.last_replayed_at) : null, failed_at: iso(dead.failed_at),
        } : null,
        history: records,
      };
      // Failures of the current round: since the message now queued was stored, or since the last replay.
      const roundStart = queue.found?.time.getTime() ?? (dead?.last_replayed_at ? Date.parse(iso(dead.last_replayed_at)) : 0);
      const round = records.filter((r) => Date.parse(r.at) >= roundStart);
      const last = round[round.length - 1];
      const withLast = (o: DeliveryShowOut): DeliveryShowOut => (last
        ? { ...o, last_status: last.status, last_error: last.error, last_attempt_at: last.at }
        : o);

      if (held) {
        if (endpoint?.status === EndpointStatus.Disabled) {
          // Issue 10: held, not attempted, until a restore sends it.
          return withLast({
            ...base, state: last ? DeliveryState.Retrying : DeliveryState.Pending, attempts: round.length,
            reason: `held ${held.where}: the endpoint is disabled (${endpoint.disabledReason ?? '?'} since ${endpoint.disabledAt ?? '?'}); nothing is sent until it is restored (POST /v1/webhooks/:id/restore), then it is delivered`,
          });
        }
        if (last) {
          const later = last.next_attempt_at !== null && Date.parse(last.next_attempt_at) > Date.now();
          const retryAfter = later && last.next_attempt_by === WaitingOn.RetryAfter;
          return withLast({
            ...base, state: DeliveryState.Retrying, attempts: round.length, next_attempt_at: last.next_attempt_at,
            waiting_on: later && last.next_attempt_by ? last.next_attempt_by : null,
            reason: `${held.where} after ${round.length} failed attempt(s)` + (retryAfter
              ? `; the endpoint answered ${last.status} with Retry-After (${Math.round((last.retry_after_ms ?? 0) / 1000)} s), which puts the next attempt later than the retry schedule would`
              : ''),
          });
        }
        if (endpoint?.rateLimit != null && await windowFull(endpointId, endpoint.rateLimit)) {
          return {
            ...base, state: DeliveryState.Pending, waiting_on: WaitingOn.RateLimit,
            reason: `${held.where}, behind the endpoint's rate limit (${endpoint.rateLimit} per second); waiting is not a failed attempt`,
          };
        }
        return { ...base, state: DeliveryState.Pending, reason: `${held.where}; no attempt has failed yet (waiting or in flight)` };
      }
      if (queue.truncated && !dead) {
        return withLast({
          ...base, attempts: round.length,
          reason: `the endpoint's backlog is longer than ${MAX_QUEUE_SCAN} messages; the message was not among the first`,
        });
      }
      if (dead?.status === DeadLetterStatus.Dead) {
        return {
          ...base, state: DeliveryState.Dead, attempts: dead.attempts, last_status: dead.last_status, last_error: dead.last_error,
          last_attempt_at: last?.at ?? iso(dead.failed_at),
          reason: `retries ran out; dead letter ${dead.id} holds the message`,
        };
      }
      const newest = records[records.length - 1];
      if (!dead && newest?.dropped) {
        return {
          ...base, state: DeliveryState.Dropped, attempts: 0, last_error: newest.error, last_attempt_at: newest.at,
          reason: `never queued, so never delivered: the event was routed at ${newest.at}, when the endpoint's queue was full (${newest.error ?? 'dropped'})`,
        };
      }
      // Successes write nothing, so an acknowledged delivery's last status is not known beyond "2xx".
      if (dead?.status === DeadLetterStatus.Replayed) {
        return {
          ...base, state: DeliveryState.Acknowledged, attempts: round.length + 1,
          reason: `replayed (${dead.replay_count}x) and answered with 2xx after ${round.length} failed attempt(s)`,
        };
      }
      if (records.length > 0) {
        return {
          ...base, state: DeliveryState.Acknowledged, attempts: round.length + 1,
          reason: `answered with 2xx after ${round.length} failed attempt(s)`,
        };
      }
      if (direct?.kind === 'acked') {
        return { ...base, state: DeliveryState.Acknowledged, attempts: 1, reason: `answered with 2xx at the first attempt (the endpoint's consumer of ${direct.stream} acked it: direct delivery)` };
      }
      return nothingFailed(base, endpoint, event, () => routerAckFloor());
    },
  };
}

/** No failure, no dead letter, not queued: acknowledged at once, not routed yet, or no delivery at all. */
async function nothingFailed(
  base: DeliveryShowOut,
  endpoint: EndpointState | undefined,
  event: { tenant: string; type: string; seq: number; at: number } | undefined,
  ackFloor: () => Promise<number>,
): Promise<DeliveryShowOut> {
  if (!endpoint) throw notFound(`endpoint ${base.endpoint_id}`);
  if (!event) {
    return { ...base, reason: 'no failure or dead letter recorded, and the event is no longer in EVENTS (kept 7 days, or erased: hookstream erase)' };
  }
  const subscribed = event.tenant === endpoint.tenant && isEventName(event.type) && matchesAny(endpoint.events, event.type);
  if (!subscribed) {
    throw notFound(`delivery of ${base.webhook_id} to ${base.endpoint_id} (the endpoint does not subscribe to ${event.type} of ${event.tenant})`);
  }
  if ((await ackFloor()) < event.seq) {
    return { ...base, state: DeliveryState.Pending, reason: 'the event is not routed yet' };
  }
  if (Date.parse(endpoint.createdAt) > event.at) {
    // The router reads subscriptions when it routes, not when the event was stored.
    return { ...base, reason: 'the endpoint was created after the event; it got the event only if the router was behind' };
  }
  if (endpoint.status !== EndpointStatus.Active) {
    return { ...base, reason: 'the endpoint is deleted; deliveries still queued at deletion were dropped' };
  }
  return { ...base, state: DeliveryState.Acknowledged, attempts: 1, reason: 'answered with 2xx at the first attempt' };
}
