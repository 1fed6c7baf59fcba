// The backstop of dead-lettering for direct delivery (streams/direct.ts): a copy of an event in a partition
// stream whose max-deliveries advisory was lost. backstop.ts's count (stored minus pending minus
// ack-pending) does not apply: a partition stream is a limits stream every endpoint of the partition reads,
// and a copy is not removed when it dies. Nor does the consumer's state show a death: nats-server 2.10
// (server/consumer.go, hasMaxDeliveries) drops a max-delivered message from its pending set as it raises
// the advisory, and the ack floor passes it as if it had been acked once nothing before it is pending
// (processAckMsg, checkPending); no count says how many died.
//
// What does say it: the delivery role writes an ATTEMPTS record for every failed attempt, the final one
// (attempt = max_deliver, no next attempt) naming the copy it sent (`copy`, streams/attempts.ts). Every
// interval this reads the ATTEMPTS records written since its last scan, up to those of the last interval
// (an advisory being handled right now is not the backstop's); a final one of a copy whose delivery
// (endpoint and webhook-id) has no dead letter row is handed to the same idempotent `bury`.
//
// Cheap when nothing is wrong: one stream info when no attempt failed since the last scan; otherwise the
// new records (every endpoint's failures, not only the final ones) read in batches through an ordered
// consumer, a request per batch (a tenant failing thousands of attempts a second must not keep the scan
// behind at a request per record), and one query for the final ones, at most MAX_READ records a scan (the
// rest at the next). A process starts reading LOOKBACK_MS back: a copy dead with its advisory lost while
// no dead-letter role ran for longer than that is missed.
import { DeliverPolicy, JetStreamApiCodes, type JetStreamClient, type JetStreamManager, type JsMsg } from '@nats-io/jetstream';
import type { MikroORM } from '@mikro-orm/postgresql';
import { ATTEMPTS_STREAM, type AttemptRecord } from '../../streams/attempts.ts';
import { isPartitionStream } from '../../streams/events.ts';
import { isApiError } from '../../streams/ensure.ts';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import type { Death } from './backstop.ts';
import { deadLetterPairs } from './store.ts';
import { everyInterval } from './every-interval.ts';

/** ATTEMPTS records read at most per scan, and per request. */
export const MAX_READ = 100_000;
const BATCH = 1000;
/** How far back a process's first scan reads. */
export const LOOKBACK_MS = 3600_000;
const ALL = 'attempts.>';

interface Final {
  endpoint: string;
  webhookId: string;
  record: AttemptRecord;
  copy: { stream: string; seq: number };
}

/** The final attempt of a direct copy, from an ATTEMPTS message; undefined for any other record. */
function finalOfCopy(m: Pick<JsMsg, 'json'>, maxDeliver: number): Final | undefined {
  let r: AttemptRecord;
  try { r = m.json<AttemptRecord>(); } catch { return undefined; }
  if (r.dropped || !r.copy || !isPartitionStream(r.copy.stream) || !Number.isSafeInteger(r.copy.seq)) return undefined;
  if (r.attempt < maxDeliver && r.next_attempt_at !== null) return undefined;
  return { endpoint: r.endpoint, webhookId: r.webhook_id, record: r, copy: r.copy };
}

/** ATTEMPTS from `from` on, as many as there are now, in batches of one request each. */
async function* attemptsFrom(js: JetStreamClient, from: number): AsyncGenerator<JsMsg> {
  const consumer = await js.consumers.get(ATTEMPTS_STREAM, { deliver_policy: DeliverPolicy.StartSequence, opt_start_seq: from });
  try {
    for (;;) {
      let got = 0;
      for await (const m of await consumer.fetch({ max_messages: BATCH, expires: 2000 })) {
        got++;
        yield m;
        if (m.info.pending === 0) return;
      }
      if (got === 0) return;
    }
  } finally {
    await consumer.delete().catch(() => {});
  }
}

export function startDirectBackstop(deps: {
  js: JetStreamClient;
  jsm: JetStreamManager;
  orm: MikroORM;
  /** retry schedule length + 1: an attempt record with this attempt number was the last one. */
  maxDeliver: number;
  intervalMs: number;
  bury: (death: Death) => Promise<boolean>;
  log: Logger;
  metrics: ServiceMetrics;
  lookbackMs?: number;
}): { stop(): Promise<void> } {
  const { jsm } = deps;
  /** The next ATTEMPTS sequence to read; unknown until the first scan. */
  let cursor: number | undefined;
  let stopped = false;

  /** The first record at or after `seq`, or null; any other failure throws (the scan is tried again). */
  const next = (seq: number) => jsm.streams.getMessage(ATTEMPTS_STREAM, { next_by_subj: ALL, seq } as never).catch((e: unknown) => {
    if (isApiError(e, JetStreamApiCodes.NoMessageFound)) return null;
    throw e;
  });

  /** The first sequence stored at `t` or later (records are stored in time order): a binary search. */
  async function firstSince(t: number, first: number, last: number): Promise<number> {
    let lo = first;
    let hi = last + 1;
    while (lo < hi) {
      const mid = Math.floor((lo + hi) / 2);
      const m = await next(mid);
      if (!m || m.time.getTime() >= t) hi = mid;
      else lo = m.seq + 1;
    }
    return lo;
  }

  async function scan(): Promise<void> {
    const { state } = await jsm.streams.info(ATTEMPTS_STREAM);
    cursor ??= await firstSince(Date.now() - (deps.lookbackMs ?? LOOKBACK_MS), state.first_seq, state.last_seq);
    if (cursor > state.last_seq) return;
    const before = Date.now() - deps.intervalMs;
    const finals = new Map<string, Final>();
    // Where the next scan starts: moved only once this one has buried what it found (a failure reads them again).
    let upTo = state.last_seq + 1;
    let read = 0;
    for await (const m of attemptsFrom(deps.js, Math.max(cursor, state.first_seq))) {
      if (stopped) return;
      if (m.seq > state.last_seq) break;
      if (m.time.getTime() > before || read >= MAX_READ) { upTo = m.seq; break; }
      read++;
      const f = finalOfCopy(m, deps.maxDeliver);
      if (f) finals.set(`${f.endpoint} ${f.webhookId}`, f);
    }
    if (finals.size > 0) {
      const dead = await deadLetterPairs(deps.orm.em.fork(), [...finals.values()]);
      for (const [key, f] of finals) {
        if (dead.has(key) || stopped) continue;
        const buried = await deps.bury({
          stream: f.copy.stream, seq: f.copy.seq, consumer: f.endpoint, deliveries: f.record.attempt, at: f.record.at, by: 'backstop',
        });
        if (buried) deps.metrics.deadLettersBackstop.inc();
      }
    }
    if (!stopped) cursor = upTo;
  }

  const scans = everyInterval(deps.intervalMs, scan, (e) => deps.log.warn('direct dead-letter backstop scan failed; trying at the next interval', { reason: describe(e) }));

  return {
    async stop() {
      stopped = true;
      await scans.stop();
    },
  };
}
