// The Postgres projection of the ENDPOINTS stream (table `endpoints`).
//
// The checkpoint row in Postgres is the position of truth. Each batch of stream messages is applied in
// ONE transaction that first locks the checkpoint row, skips every sequence at or below it, folds the
// rest with applyEndpointEvent and moves the checkpoint. So any number of projectors (one per service
// instance), a crash between the write and anything else, or a rebuild running beside a live projector
// never apply an event twice or skip one: each projector reads the stream in order, and whatever it
// skips another one has already applied under the same lock.
import { LockMode } from '@mikro-orm/core';
import type { EntityManager, MikroORM } from '@mikro-orm/postgresql';
import type { Consumer, ConsumerMessages, JetStreamClient } from '@nats-io/jetstream';
import { ClosedConnectionError, DrainingConnectionError } from '@nats-io/nats-core';
import {
  applyEndpointEvent, isDisabledReason, isEndpointEvent, MAX_RATE_LIMIT, MIN_RATE_LIMIT, type EndpointEvent, type EndpointState,
} from '../src/domain/endpoint.ts';
import { EndpointRecord, ProjectionCheckpoint } from '../src/db/entities.ts';
import { recordToRow, rowToRecordData, rowToState, stateToRow, type EndpointRow } from '../src/db/endpoint-rows.ts';
import { ENDPOINTS_STREAM } from '../streams/endpoints.ts';
import { ErrorCode, HookstreamError, describe } from '../src/errors.ts';
import type { Logger } from '../src/log.ts';

export const ENDPOINTS_PROJECTION = 'endpoints';

const BATCH_SIZE = 200;
/** The reader pauses when this many messages wait to be applied. */
const MAX_QUEUED = 2000;
const POLL_MS = 50;
const DEFAULT_WAIT_MS = 5000;

export interface ProjectorDeps {
  js: JetStreamClient;
  orm: MikroORM;
  log: Logger;
}

export interface ProjectorOptions {
  /** Messages applied per transaction at most (default 200). */
  batchSize?: number;
}

export interface EndpointProjector {
  /** Stop reading; the batch being applied is finished first. */
  stop(): Promise<void>;
  /** Highest stream sequence known to be in the projection (applied here or by another instance). */
  lastSeq(): number;
  /** Resolve once the projection has applied `seq`, by this or any other instance; reject after `timeoutMs`. */
  waitFor(seq: number, timeoutMs?: number): Promise<void>;
}

/** The projection did not reach a sequence in time (the API answers 503 or similar, never a stale read). */
export class ProjectionLagError extends HookstreamError {
  constructor(projection: string, seq: number, reached: number, timeoutMs: number) {
    super(ErrorCode.Internal, `projection ${projection} did not reach stream sequence ${seq} within ${timeoutMs} ms (it is at ${reached})`);
    this.name = 'ProjectionLagError';
  }
}

interface StreamMessage {
  seq: number;
  data: Uint8Array;
}

/** Wait `ms`, or less when `signal` aborts (shutdown must not sit out a retry delay). */
const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((resolve) => {
  const done = () => { clearTimeout(timer); signal?.removeEventListener('abort', done); resolve(); };
  const timer = setTimeout(done, ms);
  signal?.addEventListener('abort', done, { once: true });
});
const isText = (x: unknown): x is string => typeof x === 'string';
const isTime = (x: unknown): boolean => typeof x === 'string' && Number.isFinite(Date.parse(x));

/** What makes a row storable; a well-typed event carrying wrong fields must not wedge the projector. */
function rowProblem(row: EndpointRow): string | undefined {
  if (!isText(row.id) || !isText(row.tenant) || !isText(row.url)) return 'id, tenant and url must be strings';
  if (!Array.isArray(row.events) || !row.events.every(isText)) return 'events must be a list of strings';
  if (row.description !== null && !isText(row.description)) return 'description must be a string or null';
  if (row.status !== 'active' && row.status !== 'disabled' && row.status !== 'deleted') return 'status must be active, disabled or deleted';
  if (row.rateLimit !== null && !(Number.isInteger(row.rateLimit) && row.rateLimit >= MIN_RATE_LIMIT && row.rateLimit <= MAX_RATE_LIMIT)) return 'rate_limit must be an integer from 1 to 10000 or null';
  if (row.disabledReason !== null && !isDisabledReason(row.disabledReason)) return 'disabled_reason must be gone, failing or null';
  if (row.disabledAt !== null && !isTime(row.disabledAt)) return 'disabled_at must be an ISO date or null';
  if (row.signatureScheme !== 'v1' && row.signatureScheme !== 'v1a') return 'signature_scheme must be v1 or v1a';
  if (row.signingPublicKey !== null && !isText(row.signingPublicKey)) return 'signing_public_key must be a string or null';
  if (!isTime(row.createdAt) || !isTime(row.updatedAt)) return 'timestamps must be ISO dates';
  return undefined;
}

function parseEvent(m: StreamMessage, log: Logger): EndpointEvent | undefined {
  let body: unknown;
  try {
    body = JSON.parse(new TextDecoder().decode(m.data));
  } catch {
    log.warn('skipped endpoint event: not JSON', { seq: m.seq });
    return undefined;
  }
  if (!isEndpointEvent(body)) {
    log.warn('skipped endpoint event: not an endpoint event', { seq: m.seq });
    return undefined;
  }
  return body;
}

interface ParsedMessage {
  seq: number;
  event: EndpointEvent | undefined;
}

const parse = (m: StreamMessage, log: Logger): ParsedMessage => ({ seq: m.seq, event: parseEvent(m, log) });

/** Fold one message into `states`; returns the id it changed, or undefined when it was skipped. */
function foldMessage(states: Map<string, EndpointState>, { seq, event }: ParsedMessage, log: Logger): string | undefined {
  if (!event) return undefined;
  let next: EndpointState;
  try {
    next = applyEndpointEvent(states.get(event.id), event, seq);
  } catch (e) {
    log.warn('skipped endpoint event: cannot apply', { seq, id: event.id, type: event.type, reason: describe(e) });
    return undefined;
  }
  const problem = rowProblem(stateToRow(next));
  if (problem) {
    log.warn('skipped endpoint event: malformed fields', { seq, id: event.id, type: event.type, reason: problem });
    return undefined;
  }
  states.set(event.id, next);
  return event.id;
}

/** Lock this projection's checkpoint row for the rest of the transaction and return its position. */
async function lockCheckpoint(em: EntityManager, name: string): Promise<number> {
  // The row must exist to be locked; a concurrent insert of the same row is simply ignored.
  await em.execute('insert into projection_checkpoints (name, last_seq) values (?, 0) on conflict (name) do nothing', [name]);
  const row = await em.findOneOrFail(ProjectionCheckpoint, { name }, { lockMode: LockMode.PESSIMISTIC_WRITE, disableIdentityMap: true });
  return row.lastSeq;
}

async function setCheckpoint(em: EntityManager, name: string, seq: number): Promise<void> {
  await em.nativeUpdate(ProjectionCheckpoint, { name }, { lastSeq: seq });
}

/** Read the checkpoint without locking (0 when the projection never ran). */
export async function readCheckpoint(orm: MikroORM, name = ENDPOINTS_PROJECTION): Promise<number> {
  const row = await orm.em.fork().findOne(ProjectionCheckpoint, { name }, { disableIdentityMap: true });
  return row?.lastSeq ?? 0;
}

async function upsertStates(em: EntityManager, states: Map<string, EndpointState>, ids: Iterable<string>): Promise<void> {
  const data = [...ids].map((id) => rowToRecordData(stateToRow(states.get(id)!)));
  for (let i = 0; i < data.length; i += 500) await em.upsertMany(EndpointRecord, data.slice(i, i + 500));
}

/** Apply a batch (in stream order) in one transaction; returns the checkpoint after it. */
async function applyBatch(orm: MikroORM, log: Logger, batch: StreamMessage[]): Promise<number> {
  return orm.em.fork().transactional(async (em) => {
    const last = await lockCheckpoint(em, ENDPOINTS_PROJECTION);
    const fresh = batch.filter((m) => m.seq > last).map((m) => parse(m, log));
    if (fresh.length === 0) return last;
    const ids = new Set(fresh.flatMap((m) => (m.event ? [m.event.id] : [])));
    const records = ids.size ? await em.find(EndpointRecord, { id: { $in: [...ids] } }, { disableIdentityMap: true }) : [];
    const states = new Map(records.map((r) => [r.id, rowToState(recordToRow(r))]));
    const changed = new Set<string>();
    for (const m of fresh) {
      const id = foldMessage(states, m, log);
      if (id !== undefined) changed.add(id);
    }
    if (changed.size) await upsertStates(em, states, changed);
    const upTo = fresh[fresh.length - 1]!.seq;
    await setCheckpoint(em, ENDPOINTS_PROJECTION, upTo);
    return upTo;
  });
}

/**
 * Keep the `endpoints` table up to date with the ENDPOINTS stream, from the stored checkpoint on.
 * Rejects when the stream does not exist (ensure the streams first).
 */
export async function startEndpointProjector(deps: ProjectorDeps, opts: ProjectorOptions = {}): Promise<EndpointProjector> {
  const batchSize = Math.max(1, opts.batchSize ?? BATCH_SIZE);
  const log = deps.log.child({ component: 'projector', projection: ENDPOINTS_PROJECTION });
  let known = await readCheckpoint(deps.orm);
  // Highest sequence handed to the apply queue; a restarted reader continues after it.
  let queuedUpTo = known;
  const queue: StreamMessage[] = [];
  let stopped = false;
  const stopping = new AbortController();
  let consumer: Consumer | undefined;
  let messages: ConsumerMessages | undefined;
  let draining: Promise<void> | undefined;
  let queueHasRoom: (() => void) | undefined;

  interface Waiter { seq: number; resolve: () => void; reject: (e: Error) => void; timer: NodeJS.Timeout }
  const waiters = new Set<Waiter>();
  let polling = false;

  const advance = (seq: number) => {
    if (seq <= known) return;
    known = seq;
    for (const w of waiters) {
      if (w.seq <= known) {
        clearTimeout(w.timer);
        waiters.delete(w);
        w.resolve();
      }
    }
  };

  // Another instance may apply what this one is waiting for, so waiters also watch the checkpoint row.
  const poll = async () => {
    if (polling) return;
    polling = true;
    try {
      // Sleep first: usually this projector applies the event within the first interval, and then
      // the wait costs no query at all.
      while (waiters.size > 0 && !stopped) {
        await sleep(POLL_MS, stopping.signal);
        if (waiters.size === 0 || stopped) break;
        try {
          advance(await readCheckpoint(deps.orm));
        } catch (e) {
          log.warn('cannot read projection checkpoint', { reason: describe(e) });
        }
      }
    } finally {
      polling = false;
    }
  };

  const drain = async () => {
    let failures = 0;
    while (queue.length > 0 && !stopped) {
      const batch = queue.slice(0, batchSize);
      try {
        advance(await applyBatch(deps.orm, log, batch));
        queue.splice(0, batch.length);
        failures = 0;
        if (queue.length < MAX_QUEUED) queueHasRoom?.();
      } catch (e) {
        // Postgres is down or busy: keep the batch and try again; the checkpoint makes retries safe.
        failures++;
        // Capped at 5 s: after a Postgres restart the projection (and the API's writes) catch up within seconds.
        const delay = Math.min(5_000, 250 * 2 ** Math.min(failures, 7));
        log.error('cannot apply endpoint events; retrying', { fromSeq: batch[0]!.seq, toSeq: batch[batch.length - 1]!.seq, reason: describe(e), retryInMs: delay });
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
    consumer = await deps.js.consumers.get(ENDPOINTS_STREAM, { opt_start_seq: queuedUpTo + 1 });
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
          queue.push({ seq: m.seq, data: m.data });
          queuedUpTo = m.seq;
          kick();
          if (queue.length >= MAX_QUEUED) await new Promise<void>((r) => { queueHasRoom = r; });
          queueHasRoom = undefined;
        }
      } catch (e) {
        if (stopped) break;
        // The connection was closed for good (the service is shutting down): nothing to reopen.
        if (e instanceof ClosedConnectionError || e instanceof DrainingConnectionError) {
          log.warn('endpoint stream reader stopped: NATS connection closed', { afterSeq: queuedUpTo });
          break;
        }
        log.error('endpoint stream reader failed; reopening', { reason: describe(e), afterSeq: queuedUpTo });
        await sleep(1000, stopping.signal);
      }
      void consumer?.delete().catch(() => {});
      current = undefined;
    }
  };

  const reading = read(await openConsumer());
  log.info('projector started', { fromSeq: known + 1 });

  return {
    async stop() {
      if (stopped) return;
      stopped = true;
      stopping.abort();
      queueHasRoom?.();
      await messages?.close();
      await reading;
      await draining;
      await consumer?.delete().catch(() => false);
      for (const w of waiters) {
        clearTimeout(w.timer);
        w.reject(new HookstreamError(ErrorCode.Internal, `projector stopped before reaching stream sequence ${w.seq}`));
      }
      waiters.clear();
      log.info('projector stopped', { lastSeq: known });
    },
    lastSeq: () => known,
    waitFor(seq, timeoutMs = DEFAULT_WAIT_MS) {
      if (seq <= known) return Promise.resolve();
      if (stopped) return waitForCheckpoint(deps.orm, seq, timeoutMs);
      return new Promise<void>((resolve, reject) => {
        const w: Waiter = {
          seq, resolve, reject,
          timer: setTimeout(() => {
            waiters.delete(w);
            reject(new ProjectionLagError(ENDPOINTS_PROJECTION, seq, known, timeoutMs));
          }, timeoutMs),
        };
        waiters.add(w);
        void poll();
      });
    },
  };
}

/** For processes that run no projector: poll the checkpoint until it reaches `seq`. */
export async function waitForCheckpoint(orm: MikroORM, seq: number, timeoutMs = DEFAULT_WAIT_MS): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const at = await readCheckpoint(orm);
    if (at >= seq) return;
    if (Date.now() >= until) throw new ProjectionLagError(ENDPOINTS_PROJECTION, seq, at, timeoutMs);
    await sleep(POLL_MS);
  }
}

/**
 * Drop the projection and replay the stream from sequence 1 to its current end, all in one transaction
 * that holds the checkpoint lock: live projectors wait, then skip what the rebuild applied.
 */
export async function rebuildEndpointProjection(
  deps: ProjectorDeps,
  onProgress?: (done: number, total: number) => void,
): Promise<{ applied: number }> {
  const log = deps.log.child({ component: 'projector', projection: ENDPOINTS_PROJECTION });
  return deps.orm.em.fork().transactional(async (em) => {
    await lockCheckpoint(em, ENDPOINTS_PROJECTION);
    // Read the end only under the lock: no live projector can then be ahead of it.
    const { last_seq: total, messages: stored } = (await (await deps.js.streams.get(ENDPOINTS_STREAM)).info()).state;
    await em.nativeDelete(EndpointRecord, {});
    await setCheckpoint(em, ENDPOINTS_PROJECTION, 0);
    const states = new Map<string, EndpointState>();
    let applied = 0;
    if (stored > 0) {
      const consumer = await deps.js.consumers.get(ENDPOINTS_STREAM, { opt_start_seq: 1 });
      const messages = await consumer.consume({ max_messages: 512 });
      try {
        for await (const m of messages) {
          if (foldMessage(states, parse({ seq: m.seq, data: m.data }, log), log) !== undefined) applied++;
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
    await upsertStates(em, states, states.keys());
    await setCheckpoint(em, ENDPOINTS_PROJECTION, total);
    log.info('projection rebuilt', { endpoints: states.size, events: applied, lastSeq: total });
    return { applied };
  });
}
