// A checkpointed projector: folds one JetStream stream into Postgres rows, for any read model.
//
// The checkpoint row is the position of truth. Each batch of stream messages is applied in ONE
// transaction that first locks the checkpoint row, skips every sequence at or below it, folds the rest
// with the read model and moves the checkpoint. So any number of projectors (one per service instance),
// a crash between the write and anything else, or a rebuild running beside a live projector never apply
// an event twice or skip one: each projector reads the stream in order, and whatever it skips another
// one has already applied under the same lock.
//
// No single event holds the read model (issue 23): an event the read model cannot use is skipped, and a
// batch Postgres refuses is applied again one event at a time, so that the one event whose value the store
// cannot hold is skipped alone. Every skip is logged, counted and written down with its sequence and
// reason (projection_skips, shown by `hookstream projections status`) in the transaction that moves the
// checkpoint past it.
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { Consumer, ConsumerMessages, JetStreamClient } from '@nats-io/jetstream';
import { ClosedConnectionError, DrainingConnectionError, type MsgHdrs } from '@nats-io/nats-core';
import { isPostgresUnavailable, isRefusedValue } from '../src/db/orm.ts';
import { describe } from '../src/errors.ts';
import type { Logger } from '../src/log.ts';
import type { Counter } from '../src/metrics.ts';
import { clearSkipped, lockCheckpoint, readCheckpoint, recordSkipped, setCheckpoint, type Projection } from './checkpoint.ts';
import { createCheckpointWaiters, sleep, waitForCheckpoint } from './wait.ts';
import { atMost } from '../src/supervisor/stops.ts';

/**
 * How long a stop waits for its ordered consumer's deletion. The consumer is ephemeral (the server removes
 * it after 5 idle minutes anyway), and on a nats-server 2.9.10 cluster the delete took about 5 s, which
 * three projectors in a row made longer than the shutdown deadline.
 */
const DELETE_ON_STOP_MS = 1000;

const BATCH_SIZE = 200;
/** The reader pauses when this many messages wait to be applied. */
const MAX_QUEUED = 2000;

export interface StreamMessage {
  subject: string;
  seq: number;
  data: Uint8Array;
  headers?: MsgHdrs | undefined;
}

/** A message's content, or why it is skipped. */
export type Decoded<M> = { ok: true; message: M } | { ok: false; reason: string };

/** An event left out of the projection. */
interface Skip {
  seq: number;
  reason: string;
}

/** Rows being folded in one transaction. */
export interface Fold<M> {
  /** Fold one decoded message in; or why it is skipped. */
  apply(seq: number, message: M): string | undefined;
  /** Write the rows the applied messages changed; returns how many. */
  save(em: EntityManager): Promise<number>;
}

/** What a read model gives the engine: how to decode a message and fold it into its rows. */
export interface ReadModel<M> {
  name: Projection;
  stream: string;
  /** What the stream's events are about, for log lines ('endpoint'). */
  kind: string;
  decode(m: StreamMessage): Decoded<M>;
  /** A fold seeded with the stored rows that `messages` touch (a live batch). */
  load(em: EntityManager, messages: M[]): Promise<Fold<M>>;
  /** A fold seeded with nothing (a rebuild, after clear). */
  empty(): Fold<M>;
  /** Delete every row. */
  clear(em: EntityManager): Promise<void>;
}

export interface ProjectorDeps {
  js: JetStreamClient;
  orm: MikroORM;
  log: Logger;
  /** Counts skipped events, by projection. */
  skipped?: Counter;
}

export interface ProjectorOptions {
  /** Messages applied per transaction at most (default 200). */
  batchSize?: number;
}

export interface Projector {
  /** Stop reading; the batch being applied is finished first. */
  stop(): Promise<void>;
  /** Highest stream sequence known to be in the projection (applied here or by another instance). */
  lastSeq(): number;
  /** Resolve once the projection has applied `seq`, by this or any other instance; reject after `timeoutMs`. */
  waitFor(seq: number, timeoutMs?: number): Promise<void>;
}

const projectorLog = (deps: ProjectorDeps, model: ReadModel<unknown>) => deps.log.child({ component: 'projector', projection: model.name });

/** Log and count skips once their transaction committed. */
function reportSkips(deps: ProjectorDeps, model: ReadModel<unknown>, log: Logger, skips: Skip[]): void {
  for (const s of skips) log.warn(`skipped ${model.kind} event: ${s.reason}`, { seq: s.seq });
  if (skips.length) deps.skipped?.inc({ projection: model.name }, skips.length);
}

/** Apply a batch (in stream order) in one transaction; returns the checkpoint after it and what it skipped. */
async function applyBatch<M>(orm: MikroORM, model: ReadModel<M>, batch: StreamMessage[]): Promise<{ upTo: number; skips: Skip[] }> {
  return orm.em.fork().transactional(async (em) => {
    const last = await lockCheckpoint(em, model.name);
    const fresh = batch.filter((m) => m.seq > last);
    if (fresh.length === 0) return { upTo: last, skips: [] };
    const skips: Skip[] = [];
    const decoded: { seq: number; message: M }[] = [];
    for (const m of fresh) {
      const d = model.decode(m);
      if (d.ok) decoded.push({ seq: m.seq, message: d.message });
      else skips.push({ seq: m.seq, reason: d.reason });
    }
    const fold = await model.load(em, decoded.map((d) => d.message));
    for (const d of decoded) {
      const reason = fold.apply(d.seq, d.message);
      if (reason !== undefined) skips.push({ seq: d.seq, reason });
    }
    await fold.save(em);
    const upTo = fresh[fresh.length - 1]!.seq;
    await recordSkipped(em, model.name, skips);
    await setCheckpoint(em, model.name, upTo);
    return { upTo, skips };
  });
}

/** Skip one message Postgres refused; returns the checkpoint after it (unchanged when it was applied meanwhile). */
async function skipRefused(orm: MikroORM, model: ReadModel<unknown>, m: StreamMessage, reason: string): Promise<{ upTo: number; skips: Skip[] }> {
  return orm.em.fork().transactional(async (em) => {
    const last = await lockCheckpoint(em, model.name);
    if (m.seq <= last) return { upTo: last, skips: [] };
    const skips = [{ seq: m.seq, reason }];
    await recordSkipped(em, model.name, skips);
    await setCheckpoint(em, model.name, m.seq);
    return { upTo: m.seq, skips };
  });
}

/**
 * Keep `model`'s rows up to date with its stream, from the stored checkpoint on.
 * Rejects when the stream does not exist (ensure the streams first).
 */
export async function startProjector<M>(model: ReadModel<M>, deps: ProjectorDeps, opts: ProjectorOptions = {}): Promise<Projector> {
  const batchSize = Math.max(1, opts.batchSize ?? BATCH_SIZE);
  const log = projectorLog(deps, model);
  const waiters = createCheckpointWaiters({ orm: deps.orm, name: model.name, log, initial: await readCheckpoint(deps.orm, model.name) });
  // Highest sequence handed to the apply queue; a restarted reader continues after it.
  let queuedUpTo = waiters.known();
  const queue: StreamMessage[] = [];
  let stopped = false;
  const stopping = new AbortController();
  let consumer: Consumer | undefined;
  let messages: ConsumerMessages | undefined;
  let draining: Promise<void> | undefined;
  let queueHasRoom: (() => void) | undefined;

  // Up to this sequence, batches are of one event: a larger batch failed, and the event that made it
  // fail is being looked for.
  let singlyUpTo = 0;
  const drain = async () => {
    let failures = 0;
    while (queue.length > 0 && !stopped) {
      const batch = queue.slice(0, queue[0]!.seq <= singlyUpTo ? 1 : batchSize);
      try {
        const { upTo, skips } = await applyBatch(deps.orm, model, batch);
        reportSkips(deps, model, log, skips);
        waiters.advance(upTo);
        queue.splice(0, batch.length);
        failures = 0;
        if (queue.length < MAX_QUEUED) queueHasRoom?.();
      } catch (e) {
        if (!isPostgresUnavailable(e) && batch.length > 1) {
          singlyUpTo = batch[batch.length - 1]!.seq;
          continue;
        }
        // One event whose value Postgres cannot hold (issue 23: U+0000 stopped every tenant's writes).
        if (batch.length === 1 && isRefusedValue(e)) {
          const skipped = await skipRefused(deps.orm, model, batch[0]!, `refused by Postgres: ${describe(e)}`).catch(() => undefined);
          if (skipped) {
            reportSkips(deps, model, log, skipped.skips);
            waiters.advance(skipped.upTo);
            queue.splice(0, 1);
            continue;
          }
        }
        // Postgres is down or busy: keep the batch and try again; the checkpoint makes retries safe.
        failures++;
        // Capped at 5 s: after a Postgres restart the projection (and the API's writes) catch up within seconds.
        const delay = Math.min(5_000, 250 * 2 ** Math.min(failures, 7));
        log.error(`cannot apply ${model.kind} events; retrying`, { from_seq: batch[0]!.seq, to_seq: batch[batch.length - 1]!.seq, reason: describe(e), retry_in_ms: delay });
        await sleep(delay, stopping.signal);
      }
    }
  };

  const kick = () => {
    if (draining || stopped) return;
    draining = drain().finally(() => {
      draining = undefined;
      // Messages queued while the last batch committed would otherwise wait for the next arrival.
      if (queue.length > 0) kick();
    });
  };

  const openConsumer = async () => {
    consumer = await deps.js.consumers.get(model.stream, { opt_start_seq: queuedUpTo + 1 });
    messages = await consumer.consume({ max_messages: 256 });
    return messages;
  };

  const read = async (first: ConsumerMessages) => {
    let current: ConsumerMessages | undefined = first;
    while (!stopped) {
      try {
        current ??= await openConsumer();
        for await (const m of current) {
          if (stopped) break;
          if (m.seq <= queuedUpTo) continue;
          queue.push({ subject: m.subject, seq: m.seq, data: m.data, headers: m.headers });
          queuedUpTo = m.seq;
          kick();
          if (queue.length >= MAX_QUEUED) await new Promise<void>((r) => { queueHasRoom = r; });
          queueHasRoom = undefined;
        }
      } catch (e) {
        if (stopped) break;
        // The connection was closed for good (the service is shutting down): nothing to reopen.
        if (e instanceof ClosedConnectionError || e instanceof DrainingConnectionError) {
          log.warn(`${model.kind} stream reader stopped: NATS connection closed`, { after_seq: queuedUpTo });
          break;
        }
        log.error(`${model.kind} stream reader failed; reopening`, { reason: describe(e), after_seq: queuedUpTo });
        await sleep(1000, stopping.signal);
      }
      void consumer?.delete().catch(() => {});
      current = undefined;
    }
  };

  const reading = read(await openConsumer());
  log.info('projector started', { from_seq: waiters.known() + 1 });

  return {
    async stop() {
      if (stopped) return;
      stopped = true;
      stopping.abort();
      queueHasRoom?.();
      await messages?.close();
      await reading;
      await draining;
      if (consumer) await atMost(consumer.delete(), DELETE_ON_STOP_MS);
      await waiters.stop();
      log.info('projector stopped', { last_seq: waiters.known() });
    },
    lastSeq: () => waiters.known(),
    waitFor(seq, timeoutMs) {
      if (stopped && seq > waiters.known()) return waitForCheckpoint(deps.orm, model.name, seq, timeoutMs);
      return waiters.waitFor(seq, timeoutMs);
    },
  };
}

/**
 * Drop the projection and replay the stream from sequence 1 to its current end, all in one transaction
 * that holds the checkpoint lock: live projectors wait, then skip what the rebuild applied.
 */
export async function rebuildProjection<M>(
  model: ReadModel<M>,
  deps: ProjectorDeps,
  onProgress?: (done: number, total: number) => void,
): Promise<{ applied: number; skipped: number }> {
  const log = projectorLog(deps, model);
  const result = await deps.orm.em.fork().transactional(async (em) => {
    await lockCheckpoint(em, model.name);
    // Read the end only under the lock: no live projector can then be ahead of it.
    const { last_seq: total, messages: stored } = (await (await deps.js.streams.get(model.stream)).info()).state;
    await model.clear(em);
    await clearSkipped(em, model.name);
    await setCheckpoint(em, model.name, 0);
    const fold = model.empty();
    const skips: Skip[] = [];
    let applied = 0;
    if (stored > 0) {
      const consumer = await deps.js.consumers.get(model.stream, { opt_start_seq: 1 });
      const messages = await consumer.consume({ max_messages: 512 });
      try {
        for await (const m of messages) {
          const d = model.decode({ subject: m.subject, seq: m.seq, data: m.data, headers: m.headers });
          const reason = d.ok ? fold.apply(m.seq, d.message) : d.reason;
          if (reason === undefined) applied++;
          else skips.push({ seq: m.seq, reason });
          // Past the end read under the lock (newer events are the live projector's), or nothing left.
          const done = m.seq >= total || m.info.pending === 0;
          if (m.seq % 1000 === 0 || done) onProgress?.(Math.min(m.seq, total), total);
          if (done) break;
        }
      } finally {
        await messages.close();
        await consumer.delete().catch(() => false);
      }
    } else {
      onProgress?.(0, 0);
    }
    const rows = await fold.save(em);
    await recordSkipped(em, model.name, skips);
    await setCheckpoint(em, model.name, total);
    log.info('projection rebuilt', { rows, events: applied, skipped: skips.length, last_seq: total });
    return { applied, skips };
  });
  reportSkips(deps, model, log, result.skips);
  return { applied: result.applied, skipped: result.skips.length };
}
