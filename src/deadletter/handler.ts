// The dead-letter role: turns each captured max-deliveries advisory into exactly one sealed record.
// Copy first (seal + upsert), then remove the message from its work queue, then ack the advisory, so a
// crash at any step repeats the step instead of losing the message. The record is keyed by endpoint and
// webhook-id: a repeated advisory (it can repeat after a server restart) finds the record already there.
import { JetStreamApiCodes, type JetStreamClient, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import type { MikroORM } from '@mikro-orm/postgresql';
import { ADVISORIES_STREAM, DEAD_LETTER_CONSUMER, parseAdvisory } from '../../streams/dead-letters.ts';
import { ATTEMPTS_STREAM, attemptSubject, type AttemptRecord } from '../../streams/attempts.ts';
import { DeliveryHeader } from '../../streams/deliveries.ts';
import { isApiError } from '../../streams/ensure.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { describe } from '../errors.ts';
import { captureMessage } from './sealed-message.ts';
import { storeDeadLetter } from './store.ts';
import { OpsEventType } from '../../streams/ops.ts';
import type { OpsEvents } from '../ops/events.ts';

/** The advisory consumer has no backoff, so nak(d) waits exactly d (measured on nats-server 2.9). */
const RETRY_DELAY_MS = 5_000;

export interface DeadLetterSealer {
  seal(bytes: Uint8Array): Uint8Array;
}

export interface DeadLetterHandler {
  stop(): Promise<void>;
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
}): Promise<DeadLetterHandler> {
  const { js, jsm, orm, log, metrics } = deps;

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

  async function handle(m: JsMsg): Promise<void> {
    let advisory;
    try { advisory = parseAdvisory(m.json()); } catch { advisory = undefined; }
    if (!advisory) {
      log.error('malformed max-deliveries advisory skipped', { seq: m.seq, subject: m.subject });
      m.term();
      return;
    }
    const original = await jsm.streams.getMessage(advisory.stream, { seq: advisory.stream_seq }).catch((e: unknown) => {
      if (isApiError(e, JetStreamApiCodes.StreamNotFound)) return null;
      throw e;
    });
    if (!original) {
      // Already dead-lettered and removed (a repeated advisory), or dropped with a deleted endpoint.
      m.ack();
      return;
    }
    const endpoint = original.header.get(DeliveryHeader.Endpoint) || advisory.consumer;
    const webhookId = original.header.get(DeliveryHeader.WebhookId);
    const event = original.header.get(DeliveryHeader.Event);
    const tenant = original.header.get(DeliveryHeader.Tenant);
    const failure = webhookId ? await lastAttempt(endpoint, webhookId) : undefined;
    const sealed = deps.sealer.seal(captureMessage(original.subject, original.header, original.data));
    const row = await storeDeadLetter(orm.em.fork(), {
      endpointId: endpoint, tenant, webhookId, eventType: event,
      attempts: failure?.attempt ?? advisory.deliveries, lastStatus: failure?.status ?? null, lastError: failure?.error ?? null,
      failedAt: failure?.at ?? advisory.timestamp, sealed, sourceStream: advisory.stream, sourceSeq: advisory.stream_seq,
    });
    // Counted when stored: a retry after a failed removal finds the record there and does not count it again.
    if (row?.inserted) metrics.deadLettersStored.inc();
    if (deps.opsEvents && row && tenant && webhookId && event) {
      // Once per dead letter and death: a repeated advisory or a retry after a failed publish makes the
      // same message id, which OPS keeps once. Before the removal, so a failed publish is retried
      // with the advisory (after it, a retry would find the message gone and say nothing).
      await deps.opsEvents.publish({
        v: 1, type: OpsEventType.AttemptExhausted, tenant, endpoint, at: new Date().toISOString(), webhook_id: webhookId, event_type: event,
        attempts: failure?.attempt ?? advisory.deliveries, last_status: failure?.status ?? null, last_error: failure?.error ?? null,
        dead_letter_id: row.id,
      }, `exhausted.${row.id}.${row.dead_count}`);
    }
    // A removal that fails leaves the advisory unacked (the catch below naks it), so the message never
    // stays queued behind an acked advisory; the record above is kept, the upsert is idempotent.
    await remove(advisory.stream, advisory.stream_seq);
    m.ack();
    log.warn('delivery is dead; dead letter stored', {
      endpoint, tenant, webhook_id: webhookId, event, attempts: failure?.attempt ?? advisory.deliveries,
      status: failure?.status ?? null, reason: failure?.error ?? null,
    });
  }

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
    async stop() {
      await messages.close();
      await loop;
    },
  };
}
