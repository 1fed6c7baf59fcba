// The dead-letter role: turns each captured max-deliveries advisory into exactly one sealed record.
// Copy first (seal + upsert), then remove the message from its work queue, then announce it on OPS, then
// ack the advisory, so a crash at any step repeats the step instead of losing the message. The record is
// keyed by endpoint and webhook-id: a repeated advisory (it can repeat after a server restart) finds the
// record already there. A backstop (backstop.ts; direct-backstop.ts for direct delivery's copies) finds the
// deliveries whose advisory was lost.
import { JetStreamApiCodes, type JetStreamClient, type JetStreamManager, type JsMsg, type StoredMsg } from '@nats-io/jetstream';
import { headers as natsHeaders, type MsgHdrs } from '@nats-io/nats-core';
import type { MikroORM } from '@mikro-orm/postgresql';
import { ADVISORIES_STREAM, DEAD_LETTER_CONSUMER, parseAdvisory } from '../../streams/dead-letters.ts';
import { ATTEMPTS_STREAM, attemptSubject, type AttemptRecord } from '../../streams/attempts.ts';
import { consumerEndpoint, deliveryAddress, DeliveryHeader } from '../../streams/deliveries.ts';
import { isPartitionStream, sourcedSeq } from '../../streams/events.ts';
import { orderingHeader } from '../nats/ordering-header.ts';
import type { DirectEvents } from '../delivery/direct-events.ts';
import { isApiError } from '../../streams/ensure.ts';
import type { Logger } from '../log.ts';
import { createSampledWarnings } from '../sampled-log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { describe } from '../errors.ts';
import { captureMessage } from './sealed-message.ts';
import { findSourceDeadLetter, storeDeadLetter, type DeadLetterRow } from './store.ts';
import { startBackstop, type Death } from './backstop.ts';
import { startDirectBackstop } from './direct-backstop.ts';
import type { DeadLetterIdentity } from './tag.ts';
import { OpsEventType } from '../../streams/ops.ts';
import { deliveryData, subjectsOf, type SubjectRef } from '../erasure/subject-hash.ts';
import { isDataKeyErased, type DataKeys } from '../erasure/data-keys.ts';
import type { OpsEvents } from '../ops/events.ts';
import { Attr, directContextOf, traceDeadLetter, traceIdOf, TRACEPARENT_HEADER, tracing, writeContext } from '../telemetry/tracing.ts';

/** The advisory consumer has no backoff, so nak(d) waits exactly d (measured on nats-server 2.9). */
const RETRY_DELAY_MS = 5_000;
const DEATH_WARNING_INTERVAL_MS = 5 * 60_000;

export interface DeadLetterSealer {
  /** To the dead-letter public key. */
  seal(bytes: Uint8Array): Uint8Array;
  /** The authentication tag binding the message to its row (tag.ts). */
  tag(identity: DeadLetterIdentity, bytes: Uint8Array): Uint8Array;
  /** The keyed hash of a subject id, stored beside the sealed message so erasure finds it (issue 22). */
  subjects?: (s: SubjectRef) => string;
}

/** A dead delivery as its dead letter keeps it: the message (subject, headers, body as queued) and its body in plain. */
interface DeadDelivery {
  endpoint: string;
  subject: string;
  header: MsgHdrs;
  data: Uint8Array;
  plain: Uint8Array;
}

/**
 * A copy of an event in a partition stream as the delivery to `endpoint` it stood for: what the router
 * would have queued (src/router/router.ts), so its dead letter is shown, checked and replayed as any
 * other. Undefined for an event the router refuses (never sent).
 */
function asDelivery(direct: { events: DirectEvents; shards: number }, endpoint: string, copy: StoredMsg): DeadDelivery | undefined {
  const e = direct.events.of({ subject: copy.subject, data: copy.data, headers: copy.header });
  const eventSeq = sourcedSeq(copy.header);
  if (!e || eventSeq === undefined) return undefined;
  const header = natsHeaders();
  header.set(DeliveryHeader.WebhookId, e.webhookId);
  header.set(DeliveryHeader.Event, e.event);
  header.set(DeliveryHeader.Tenant, copy.subject.split('.')[1]!);
  header.set(DeliveryHeader.Endpoint, endpoint);
  header.set(DeliveryHeader.EventSeq, String(eventSeq));
  const key = orderingHeader(copy.header);
  if (key) header.set(DeliveryHeader.OrderingKey, key);
  // Traced: the router's span of the event, as a queued delivery carries it (its attempts' parent).
  if (tracing.on) writeContext((name, value) => header.set(name, value), directContextOf(copy.header, e.webhookId));
  else {
    const traceparent = copy.header.get(TRACEPARENT_HEADER);
    if (traceparent) header.set(TRACEPARENT_HEADER, traceparent);
  }
  return { endpoint, subject: deliveryAddress(endpoint, direct.shards).subject, header, data: e.body, plain: e.body };
}

export interface DeadLetterHandler {
  stop(): Promise<void>;
  /** Settles when the handler's loop ends (src/supervisor/roles.ts). */
  readonly done: Promise<void>;
}

export async function startDeadLetterHandler(deps: {
  js: JetStreamClient;
  jsm: JetStreamManager;
  orm: MikroORM;
  sealer: DeadLetterSealer;
  log: Logger;
  metrics: ServiceMetrics;
  /** Delay before a failed advisory is tried again (tests shorten it). */
  retryDelayMs?: number;
  /** Where `message.attempt.exhausted` goes (issue 10); absent in tests that do not need it. */
  opsEvents?: OpsEvents;
  /** The backstop (issue 17): how often it looks for dead deliveries whose advisory was lost; 0 turns it off. */
  backstop?: { intervalMs: number; shards: number; maxDeliver: number; stepdown?: (stream: string, consumer: string) => Promise<string> };
  /** Opens sealed delivery bodies (src/erasure/data-keys.ts) to hash their subjects; the dead letter keeps the body sealed. */
  bodies?: Pick<DataKeys, 'open'> | undefined;
  /**
   * Direct delivery: a dead copy of an event in a partition stream becomes the delivery it stood for (its
   * endpoint's delivery subject and headers, the body made from the event), so it is shown and replayed as
   * any dead letter; the copy stays (the tenant's other endpoints read it). `bodies` seals that body under
   * its event's data key as the router seals a queued one (creating the key when the router never met the
   * subject), so erasure shreds the dead letter and its backups alike; absent, it is kept plain
   * (HOOKSTREAM_SEAL_DELIVERIES=0).
   */
  direct?: { events: DirectEvents; shards: number; bodies?: Pick<DataKeys, 'seal'> | undefined } | undefined;
}): Promise<DeadLetterHandler> {
  const { js, jsm, orm, log, metrics } = deps;
  // An endpoint's first death is a warning, then one every 5 minutes; the rest at debug (each is stored,
  // counted and announced on OPS anyway).
  const deaths = createSampledWarnings(log, { intervalMs: DEATH_WARNING_INTERVAL_MS });

  async function lastAttempt(endpoint: string, webhookId: string): Promise<AttemptRecord | undefined> {
    const m = await jsm.streams.getMessage(ATTEMPTS_STREAM, { last_by_subj: attemptSubject(endpoint, webhookId) });
    return m ? m.json<AttemptRecord>() : undefined;
  }

  /** Delete the dead message from its work queue; "already gone" is success, anything else throws. */
  async function remove(stream: string, seq: number): Promise<void> {
    try {
      await jsm.streams.deleteMessage(stream, seq);
    } catch (e) {
      if (isApiError(e, JetStreamApiCodes.StreamNotFound)) return;
      // nats-server answers 10057 both for a missing message and for a real failure (denied, I/O): ask
      // the stream instead of reading the error text.
      const still = await jsm.streams.getMessage(stream, { seq }).catch(() => undefined);
      if (still === null) return;
      throw e;
    }
  }

  /** A delivery body in plain (undefined: its data key was erased). */
  async function opened(body: Uint8Array): Promise<Uint8Array | undefined> {
    try {
      return deps.bodies ? await deps.bodies.open(body) : body;
    } catch (e) {
      if (isDataKeyErased(e)) return undefined;
      throw e;
    }
  }

  /** Tell the operational-event readers, once per dead letter and death (the message id dedupes repeats). */
  async function announce(row: Pick<DeadLetterRow, 'id' | 'dead_count' | 'tenant' | 'endpoint_id' | 'webhook_id' | 'event_type' | 'attempts' | 'last_status' | 'last_error'>): Promise<void> {
    if (!deps.opsEvents) return;
    await deps.opsEvents.publish({
      v: 1, type: OpsEventType.AttemptExhausted, tenant: row.tenant, endpoint: row.endpoint_id, at: new Date().toISOString(),
      webhook_id: row.webhook_id, event_type: row.event_type, attempts: row.attempts, last_status: row.last_status,
      last_error: row.last_error, dead_letter_id: row.id,
    }, `exhausted.${row.id}.${row.dead_count}`);
  }

  /**
   * Dead-letter the message at `stream`/`seq`, dropped by its endpoint's consumer: copy (seal + upsert),
   * remove it from its work queue, then announce it. Every step is idempotent, so whoever calls it again
   * (a repeated or retried advisory, the backstop) repeats what did not happen. Returns false when the
   * message was already gone and no record names it (dropped with a deleted endpoint; a direct copy
   * erased), or was never sent.
   */
  async function bury(death: Death): Promise<boolean> {
    const original = await jsm.streams.getMessage(death.stream, { seq: death.seq }).catch((e: unknown) => {
      if (isApiError(e, JetStreamApiCodes.StreamNotFound)) return null;
      throw e;
    });
    if (deps.direct && isPartitionStream(death.stream)) {
      // Gone: its event was erased (or outlived its retention); an event the router refuses was never sent.
      const delivery = original && asDelivery(deps.direct, death.consumer, original);
      if (!delivery) return false;
      const sealer = deps.direct.bodies;
      // As the router seals the body it queues (src/router/router.ts): under the key of the event's tenant and subjects.
      if (sealer) delivery.data = await sealer.seal(delivery.header.get(DeliveryHeader.Tenant), deliveryData(delivery.plain), delivery.plain);
      await store(death, delivery, false);
      return true;
    }
    if (!original) {
      // Already dead-lettered and removed: announce again, in case that is what failed the last time.
      const row = await findSourceDeadLetter(orm.em.fork(), death.stream, death.seq);
      if (row) await announce(row);
      return row !== undefined;
    }
    const endpoint = original.header.get(DeliveryHeader.Endpoint) || consumerEndpoint(death.consumer).endpoint;
    // A sealed body whose data subject was erased is not kept: removed, as the delivery role drops it.
    const plain = await opened(original.data);
    if (!plain) {
      await remove(death.stream, death.seq);
      log.info('dead delivery dropped: its data subject was erased', { endpoint, webhook_id: original.header.get(DeliveryHeader.WebhookId) });
      return true;
    }
    await store(death, { endpoint, subject: original.subject, header: original.header, data: original.data, plain }, true);
    return true;
  }

  /** Store the dead letter of `d`, remove its message from its work queue (`remove`), then announce it. */
  async function store(death: Death, d: DeadDelivery, removeIt: boolean): Promise<void> {
    const { endpoint, header } = d;
    const webhookId = header.get(DeliveryHeader.WebhookId);
    const event = header.get(DeliveryHeader.Event);
    const tenant = header.get(DeliveryHeader.Tenant);
    const failure = webhookId ? await lastAttempt(endpoint, webhookId) : undefined;
    const message = captureMessage(d.subject, header, d.data);
    const attempts = failure?.attempt ?? death.deliveries;
    const traceId = traceIdOf(header);
    const row = await storeDeadLetter(orm.em.fork(), {
      endpointId: endpoint, tenant, webhookId, eventType: event,
      attempts, lastStatus: failure?.status ?? null, lastError: failure?.error ?? null,
      failedAt: failure?.at ?? death.at, sourceStream: death.stream, sourceSeq: death.seq,
      sealed: deps.sealer.seal(message), tag: deps.sealer.tag({ endpointId: endpoint, tenant, webhookId, eventType: event }, message),
      subjectHashes: deps.sealer.subjects
        ? subjectsOf(deliveryData(d.plain), header.get(DeliveryHeader.OrderingKey) || undefined).map(deps.sealer.subjects) : [],
      traceId,
    });
    // Counted when stored: a retry after a failed removal finds the record there and does not count it again.
    if (row?.inserted) metrics.deadLettersStored.inc();
    // The record first, then the removal, then the notice (issue 17): a notice never announces a dead
    // letter that is not there, and an unavailable OPS stream does not keep a dead message in its queue.
    if (removeIt) await remove(death.stream, death.seq);
    // Traced: the end of the delivery's trace, whose id its row and this line keep.
    if (tracing.on && row) traceDeadLetter(header, { [Attr.Endpoint]: endpoint, [Attr.WebhookId]: webhookId, [Attr.DeadLetter]: row.id, [Attr.Attempts]: attempts });
    deaths.warn(endpoint, 'delivery is dead; dead letter stored', {
      endpoint, tenant, webhook_id: webhookId, event, attempts, status: failure?.status ?? null, reason: failure?.error ?? null, ...(traceId ? { trace_id: traceId } : {}),
      ...(death.by === 'backstop' ? { found_by: 'backstop' } : {}),
    });
    if (row && tenant && webhookId && event) {
      await announce({
        id: row.id, dead_count: row.dead_count, tenant, endpoint_id: endpoint, webhook_id: webhookId, event_type: event,
        attempts, last_status: failure?.status ?? null, last_error: failure?.error ?? null,
      });
    }
  }

  async function handle(m: JsMsg): Promise<void> {
    let advisory;
    try { advisory = parseAdvisory(m.json()); } catch { advisory = undefined; }
    if (!advisory) {
      log.error('malformed max-deliveries advisory skipped', { seq: m.seq, subject: m.subject });
      m.term();
      return;
    }
    // A failure anywhere throws: the advisory is nak'd (below) and comes back, so nothing is acked
    // while the message still sits in its queue or its notice is unsent.
    await bury({ stream: advisory.stream, seq: advisory.stream_seq, consumer: advisory.consumer, deliveries: advisory.deliveries, at: advisory.timestamp, by: 'advisory' });
    m.ack();
  }

  const backstop = deps.backstop && deps.backstop.intervalMs > 0
    ? startBackstop({ jsm, ...deps.backstop, bury, log, metrics })
    : undefined;
  // Direct delivery's copies, found from their final attempt records (direct-backstop.ts).
  const directBackstop = deps.direct && deps.backstop && deps.backstop.intervalMs > 0
    ? startDirectBackstop({ js, jsm, orm, maxDeliver: deps.backstop.maxDeliver, intervalMs: deps.backstop.intervalMs, bury, log, metrics })
    : undefined;

  const consumer = await js.consumers.get(ADVISORIES_STREAM, DEAD_LETTER_CONSUMER);
  const messages = await consumer.consume({ max_messages: 64 });
  const loop = (async () => {
    for await (const m of messages) {
      try {
        await handle(m);
      } catch (e) {
        // Back in 5 s rather than after the 30 s ack wait (Postgres restarting, say); every step above is idempotent.
        log.error('dead-lettering failed; will retry', { seq: m.seq, reason: describe(e) });
        m.nak(deps.retryDelayMs ?? RETRY_DELAY_MS);
      }
    }
  })();

  return {
    done: loop,
    async stop() {
      await backstop?.stop();
      await directBackstop?.stop();
      await messages.close();
      await loop;
    },
  };
}
