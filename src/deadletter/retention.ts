// Dead letters are kept for HOOKSTREAM_DEAD_LETTER_RETENTION after they died (or were last replayed),
// then deleted, counted and logged (issue 22: they hold tenants' personal data, sealed, and were kept
// with no limit). One sweep at start and then every hour; small batches, so a large backlog of expired
// rows never holds a lock on the table for long.
import type { MikroORM } from '@mikro-orm/postgresql';
import { describe } from '../errors.ts';
import { formatDuration } from '../domain/duration.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { deleteExpiredDeadLetters } from './store.ts';

const SWEEP_EVERY_MS = 3600_000;
const FIRST_SWEEP_AFTER_MS = 10_000;
const BATCH = 1000;

export interface DeadLetterRetention {
  /** Delete what is past its retention now; how many rows went. */
  sweep(): Promise<number>;
  stop(): Promise<void>;
}

export function startDeadLetterRetention(deps: {
  orm: MikroORM; retentionMs: number; log: Logger; metrics: ServiceMetrics;
}): DeadLetterRetention {
  const { log } = deps;
  let stopped = false;
  let running: Promise<unknown> = Promise.resolve();

  async function sweep(): Promise<number> {
    const before = new Date(Date.now() - deps.retentionMs);
    let total = 0;
    for (let n = BATCH; n === BATCH && !stopped;) {
      n = await deleteExpiredDeadLetters(deps.orm.em.fork(), before, BATCH);
      total += n;
      deps.metrics.deadLettersExpired.inc({}, n);
    }
    if (total > 0) log.info('dead letters past their retention deleted', { count: total, retention: formatDuration(deps.retentionMs) });
    return total;
  }

  const run = () => {
    running = sweep().catch((e: unknown) => log.warn('could not delete expired dead letters; trying again later', { reason: describe(e) }));
  };
  const first = setTimeout(run, FIRST_SWEEP_AFTER_MS);
  const timer = setInterval(run, SWEEP_EVERY_MS);
  first.unref();
  timer.unref();

  return {
    sweep,
    async stop() {
      stopped = true;
      clearTimeout(first);
      clearInterval(timer);
      await running;
    },
  };
}
