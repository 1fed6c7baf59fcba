// Erasure by subject (issue 22): every stored payload of one tenant that carries a user's (or an
// organization's) id, found without scanning days of streams:
//   - routed events, their queued deliveries and their attempt records: from the subject's rows of the
//     erasure index in Postgres (by key), and the index stream past the projection's checkpoint;
//   - events not yet routed: the router's unrouted tail of EVENTS (its ack floor to the end, or the event
//     index's checkpoint where that is lower), the tenant's subject only; then erasure waits for the router
//     to pass the point where it started, so an event being routed meanwhile has its index entry written
//     and is erased too;
//   - dead letters: by the hashes stored with them (rows from before the hashes are opened and read);
//   - rejected events: the tenant's REJECTED subject (7 days, bounded in bytes), and their EVENTS copies.
// Events published after erasure started are left alone. Every step deletes what is still there and
// counts it, so a second run finds nothing and a run cut short is finished by the next one.
import type { MikroORM } from '@mikro-orm/postgresql';
import { JetStreamApiCodes, type JetStreamManager } from '@nats-io/jetstream';
import { messagesOf } from './by-subject.ts';
import { EVENTS_STREAM, eventsStart, ROUTER_CONSUMER, routerFloor as routerFloorOf } from '../../streams/events.ts';
import { drainFloor } from '../router/drains.ts';
import { ATTEMPTS_STREAM, attemptSubject } from '../../streams/attempts.ts';
import { deliveryAddress, DeliveryHeader } from '../../streams/deliveries.ts';
import { RejectedHeader, REJECTED_STREAM, rejectedTenantSubject } from '../../streams/rejected.ts';
import { ERASURE_INDEX_STREAM } from '../../streams/erasure-index.ts';
import { Projection, readCheckpoint } from '../../projections/checkpoint.ts';
import { waitForCheckpoint } from '../../projections/wait.ts';
import { decodeIndexMessage } from '../../projections/erasure-index.ts';
import { deleteSubjectIndexRows, subjectIndexRows, type IndexRow } from './index-store.ts';
import { isApiError } from '../../streams/ensure.ts';
import { parseEvent } from '../domain/event-data.ts';
import { orderingHeader } from '../nats/ordering-header.ts';
import { deleteDeadLetters, deleteSubjectDeadLetters, unhashedDeadLetters } from '../deadletter/store.ts';
import { originalHeader } from '../deadletter/sealed-message.ts';
import type { DeadLetterOpener } from '../admin/opener.ts';
import { ERASURE_ROUTING_WAIT_MS, type SubjectErasureOut } from '../admin/protocol.ts';

/** How long erasure waits for the index projection to apply what the router wrote, before reading the rest from the stream. */
const PROJECTION_WAIT_MS = 10_000;
import type { Logger } from '../log.ts';
import { describe } from '../errors.ts';
import { eraseAttempts } from '../deliverylog/retention.ts';
import { carries, deliveryData, lookups, SubjectKind, type SubjectHasher, type SubjectRef } from './subject-hash.ts';
import { destroyDataKeys, type DataKeys } from './data-keys.ts';
import { partitionCopies } from './partition-copies.ts';
import type { NatsConnection } from '@nats-io/nats-core';

/** Deletes in flight at once. */
const PARALLEL = 32;

export interface Erasure {
  eraseSubject(tenant: string, subject: SubjectRef, opts?: { routingWaitMs?: number; projectionWaitMs?: number }): Promise<SubjectErasureOut>;
}

/** Run `fn` over `items`, PARALLEL at a time. */
async function each<T>(items: readonly T[], fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const worker = async () => { while (next < items.length) await fn(items[next++]!); };
  await Promise.all(Array.from({ length: Math.min(PARALLEL, items.length) }, worker));
}

export function createErasure(deps: {
  jsm: JetStreamManager; orm: MikroORM; hasher: SubjectHasher; opener: DeadLetterOpener; log: Logger;
  /** HOOKSTREAM_DELIVERY_SHARDS: where a dead letter's endpoint's queue is, for replays made before their locations were kept. */
  shards?: number;
  /** HOOKSTREAM_EVENT_PARTITIONS: each event erased has a copy in its tenant's partition stream too; absent: none. */
  partitions?: number;
  /** The data keys to destroy, and where to tell every process to forget them; absent: no body is sealed (benches). */
  shredding?: { keys: Pick<DataKeys, 'refsOf'>; nc: NatsConnection } | undefined;
}): Erasure {
  const { jsm, log } = deps;

  /**
   * Delete one message; false when it was not there (already gone, or its stream is). A payload is
   * deleted with secure erase (its bytes overwritten in the store); index entries and attempt records,
   * which hold none, without (secure erase cost 60 ms a message on nats-server 2.15.1: README, Performance).
   */
  async function erase(stream: string, seq: number, secure = true): Promise<boolean> {
    try {
      await jsm.streams.deleteMessage(stream, seq, secure);
      return true;
    } catch (e) {
      if (isApiError(e, JetStreamApiCodes.StreamNotFound)) return false;
      // 10057 means both "no such message" and a real failure: ask the stream (as the dead-letter role does).
      const still = await jsm.streams.getMessage(stream, { seq }).catch(() => undefined);
      if (still === null) return false;
      throw e;
    }
  }

  const bySubject = (stream: string, subject: string, from: number, upTo: number) => messagesOf(jsm, stream, subject, from, upTo);

  const lastSeq = async (stream: string): Promise<number> => (await jsm.streams.info(stream)).state.last_seq;
  /** `holding`: events handed to a router and not yet acked by it. */
  const routerFloor = async (): Promise<{ floor: number; holding: number }> => {
    const c = await jsm.consumers.info(EVENTS_STREAM, ROUTER_CONSUMER);
    return { floor: routerFloorOf(c), holding: c.num_ack_pending };
  };


  return {
    async eraseSubject(tenant, subject, opts = {}) {
      const started = performance.now();
      const hashes = deps.hasher.all(subject);
      const boundary = await lastSeq(EVENTS_STREAM);
      const out: SubjectErasureOut = {
        tenant, subject, events_up_to_seq: boundary, routing_caught_up: true,
        stores: {
          data_keys: { destroyed: 0 }, events: { erased: 0 }, unrouted_events: { scanned: 0, erased: 0 }, deliveries: { erased: 0, already_gone: 0 },
          attempts: { erased: 0 }, dead_letters: { erased: 0 }, replays: { erased: 0 }, rejected: { scanned: 0, erased: 0 }, index: { entries: 0, erased: 0, unapplied_scanned: 0 },
          partition_copies: { erased: 0 },
        },
      };
      const s = out.stores;
      // The EVENTS sequences of every event erased (or already gone), whose partition copies go at the end.
      const events = new Set<number>();

      // 0. The subject's data keys first: from now on no copy of a body sealed under them opens, wherever it
      //    is (an acknowledged delivery's bytes in its queue's block, a replica, a dead letter), and an
      //    attempt that starts now drops its delivery. Again at the end: a key a router made meanwhile for
      //    an event routed during the erasure goes too.
      const shred = async () => {
        if (!deps.shredding) return;
        const refs = await deps.shredding.keys.refsOf(tenant, lookups(subject).filter((l) => l.kind !== SubjectKind.Key));
        if (refs.length > 0) s.data_keys.destroyed += await destroyDataKeys({ jsm, nc: deps.shredding.nc }, tenant, refs);
      };
      await shred();

      // 1. Not yet routed: the tenant's events past the router's ack floor. An event that does not parse
      //    (it will be rejected) is erased when its body holds the id as a JSON string.
      const quoted = JSON.stringify(subject.id);
      // A tenant being drained (src/router/drains.ts) has unrouted events below the floor too: from its drain's place.
      // Where the event index has the events the routers do not index, its checkpoint bounds the tail too.
      const { floor: consumerFloor } = await routerFloor();
      const indexed = deps.partitions ? await readCheckpoint(deps.orm, Projection.EventIndex) : Infinity;
      const floor = Math.min(consumerFloor, indexed, await drainFloor(jsm, tenant) ?? Infinity);
      for await (const m of bySubject(EVENTS_STREAM, `events.${tenant}.>`, floor + 1, boundary)) {
        s.unrouted_events.scanned++;
        const parsed = parseEvent(m.subject, m.data, { maxBytes: Number.MAX_SAFE_INTEGER, maxDepth: Number.MAX_SAFE_INTEGER });
        const key = orderingHeader(m.header);
        const match = parsed.ok ? carries(parsed.data, key, subject) : Buffer.from(m.data).toString('utf8').includes(quoted);
        if (!match) continue;
        events.add(m.seq);
        if (await erase(EVENTS_STREAM, m.seq)) s.unrouted_events.erased++;
      }

      // 2. An event a router held while the tail was read (erased there or not) may still be routed, and is
      //    indexed before its ack: wait until the router has acked everything up to the boundary, or holds
      //    nothing (what it takes next was past the floor when the tail was read: erased, or not the user's).
      const waitUntil = performance.now() + (opts.routingWaitMs ?? ERASURE_ROUTING_WAIT_MS);
      for (;;) {
        const r = await routerFloor();
        if (r.floor >= boundary || r.holding === 0) break;
        if (performance.now() > waitUntil) { out.routing_caught_up = false; break; }
        await new Promise((resolve) => setTimeout(resolve, 100));
      }

      // 3. Routed events: the subject's index rows (Postgres, by key), and the entries the index projection
      //    has not applied yet (the stream past its checkpoint, after a short wait for it to catch up),
      //    each pointing at the event, its deliveries and their attempts.
      const em = deps.orm.em.fork();
      const entries = new Map<number, IndexRow>();
      const indexEnd = await lastSeq(ERASURE_INDEX_STREAM);
      await waitForCheckpoint(deps.orm, Projection.ErasureIndex, indexEnd, opts.projectionWaitMs ?? PROJECTION_WAIT_MS).catch(() => {});
      const applied = await readCheckpoint(deps.orm, Projection.ErasureIndex);
      for (const row of await subjectIndexRows(em, tenant, hashes, boundary)) entries.set(row.events_seq, row);
      for await (const m of bySubject(ERASURE_INDEX_STREAM, 'erasure.>', applied + 1, indexEnd)) {
        s.index.unapplied_scanned++;
        const decoded = decodeIndexMessage(m);
        if (!decoded.ok) continue;
        for (const e of decoded.message) {
          if (e.tenant === tenant && e.events_seq <= boundary && e.hashes.some((h) => hashes.includes(h))) entries.set(e.events_seq, e);
        }
      }
      s.index.entries += entries.size;
      // Message by message rather than a purge: the admin NATS user may delete, never purge (nats.conf).
      const eraseAttemptRecords = async (endpoint: string, webhookId: string) => {
        for await (const a of bySubject(ATTEMPTS_STREAM, attemptSubject(endpoint, webhookId), 1, Number.MAX_SAFE_INTEGER)) {
          if (await erase(ATTEMPTS_STREAM, a.seq, false)) s.attempts.erased++;
        }
      };
      // With direct delivery, an endpoint read the event from its partition stream: no delivery of it is
      // indexed, so the attempts of each of the tenant's endpoints are looked up. Since it was ever on, not
      // only for events in its window: an event outside it costs a few reads that find nothing more.
      const direct = (await eventsStart(jsm)).directSince !== undefined
        ? (await em.execute<{ id: string }[]>('select id from endpoints where tenant = ?', [tenant])).map((r) => r.id) : [];
      await each([...entries.values()], async (entry) => {
        events.add(entry.events_seq);
        if (await erase(EVENTS_STREAM, entry.events_seq)) s.events.erased++;
        for (const [stream, dseq, endpoint] of entry.deliveries) {
          if (await erase(stream, dseq)) s.deliveries.erased++;
          else s.deliveries.already_gone++;
          await eraseAttemptRecords(endpoint, entry.webhook_id);
        }
        for (const endpoint of direct) {
          if (!entry.deliveries.some((d) => d[2] === endpoint)) await eraseAttemptRecords(endpoint, entry.webhook_id);
        }
      });
      // Rows only: a batch in the stream holds other subjects' entries too (and no id; it expires with the stream).
      s.index.erased += await deleteSubjectIndexRows(em, tenant, hashes, [...entries.keys()]);
      // The delivery log's rows of these deliveries (src/deliverylog/retention.ts).
      s.attempts.erased += await eraseAttempts(deps, em, tenant, [...entries.values()].map((e) => e.webhook_id));

      // 4. Dead letters: by hash; rows stored before hashes were kept are opened and read (the tenant's only).
      const deadLetters = await deleteSubjectDeadLetters(em, tenant, hashes);
      const legacy = (await unhashedDeadLetters(em, tenant)).filter((row) => {
        try {
          const { message } = deps.opener.open(row);
          return carries(deliveryData(Buffer.from(message.body_base64, 'base64')), originalHeader(message, DeliveryHeader.OrderingKey), subject);
        } catch (e) {
          log.warn('erasure could not open a dead letter to read its subjects; left as it is', { id: row.id, reason: describe(e) });
          return false;
        }
      });
      deadLetters.push(...await deleteDeadLetters(em, legacy.map((r) => r.id)));
      s.dead_letters.erased += deadLetters.length;
      //    Their replays still queued or waiting for a retry: never delivered. One that died meanwhile was
      //    dead-lettered again from its queued copy: that new dead letter goes too.
      const replays = deadLetters.flatMap((d) => d.replayed_to);
      //    Replays made before their locations were kept (migration 0015): looked for in their endpoint's
      //    queue by webhook-id (the queue is read once per such dead letter; normally there are none).
      if (deps.shards !== undefined) {
        for (const d of deadLetters.filter((row) => row.replay_count > row.replayed_to.length)) {
          const at = deliveryAddress(d.endpoint_id, deps.shards);
          for await (const m of bySubject(at.stream, at.subject, 1, Number.MAX_SAFE_INTEGER)) {
            if (m.header?.get(DeliveryHeader.WebhookId) === d.webhook_id && m.header.has(DeliveryHeader.Replay)) replays.push([at.stream, m.seq]);
          }
        }
      }
      await each(replays, async ([stream, seq]) => { if (await erase(stream, seq)) s.replays.erased++; });
      if (replays.length > 0) s.dead_letters.erased += (await deleteSubjectDeadLetters(em, tenant, hashes)).length;

      // 5. Rejected events of the tenant (bodies as published, maybe not JSON): those holding the id as a
      //    JSON string, and their copies in EVENTS.
      const rejectedEnd = await lastSeq(REJECTED_STREAM);
      for await (const m of bySubject(REJECTED_STREAM, rejectedTenantSubject(tenant), 1, rejectedEnd)) {
        s.rejected.scanned++;
        if (!Buffer.from(m.data).toString('utf8').includes(quoted)) continue;
        const eventsSeq = Number(m.header.get(RejectedHeader.EventsSeq));
        if (Number.isSafeInteger(eventsSeq) && eventsSeq > boundary) continue;
        if (await erase(REJECTED_STREAM, m.seq)) s.rejected.erased++;
        if (!Number.isSafeInteger(eventsSeq) || eventsSeq <= 0) continue;
        events.add(eventsSeq);
        if (await erase(EVENTS_STREAM, eventsSeq)) s.events.erased++;
      }

      // 6. The copies of those events in the tenant's partition stream, once nats-server has copied what
      //    it was copying (an event erased above before its copy was made is never copied).
      const copies = partitionCopies(jsm, deps.partitions ?? 0, tenant);
      if (copies && events.size > 0) {
        if (!await copies.caughtUp(opts.routingWaitMs ?? ERASURE_ROUTING_WAIT_MS)) out.routing_caught_up = false;
        await each(await copies.find(events), async (seq) => { if (await erase(copies.stream, seq)) s.partition_copies.erased++; });
      }

      await shred();

      log.info('subject erased', {
        tenant, kind: subject.kind, data_keys: s.data_keys.destroyed, events: s.events.erased + s.unrouted_events.erased, deliveries: s.deliveries.erased,
        dead_letters: s.dead_letters.erased, replays: s.replays.erased, rejected: s.rejected.erased, index_entries: s.index.entries,
        routing_caught_up: out.routing_caught_up, ms: Math.round(performance.now() - started),
      });
      return out;
    },
  };
}
