// A table's rows past their retention, deleted in small batches (so a large backlog of expired rows never
// holds a lock for long), once shortly after start and then every hour: dead letters and the erasure
// index (issue 22). What went is counted and logged by the caller's `deleted`.
import type { MikroORM } from '@mikro-orm/postgresql';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';

const SWEEP_EVERY_MS = 3600_000;
const FIRST_SWEEP_AFTER_MS = 10_000;
const BATCH = 1000;

export interface RetentionSweep {
  /** Delete what is past its retention now; how many rows went. */
  sweep(): Promise<number>;
  stop(): Promise<void>;
}

export function startRetentionSweep(deps: {
  orm: MikroORM;
  retentionMs: number;
  /** Delete up to `limit` rows older than `before`; how many went. */
  deleteExpired: (em: ReturnType<MikroORM['em']['fork']>, before: Date, limit: number) => Promise<number>;
  /** Called after a sweep that deleted something, with how many rows went. */
  deleted: (n: number) => void;
  /** What the rows are, for the warning when a sweep fails ('expired dead letters'). */
  what: string;
  log: Logger;
}): RetentionSweep {
  let stopped = false;
  let running: Promise<unknown> = Promise.resolve();

  async function sweep(): Promise<number> {
    const before = new Date(Date.now() - deps.retentionMs);
    let total = 0;
    for (let n = BATCH; n === BATCH && !stopped;) {
      n = await deps.deleteExpired(deps.orm.em.fork(), before, BATCH);
      total += n;
    }
    if (total > 0) deps.deleted(total);
    return total;
  }

  const run = () => {
    running = sweep().catch((e: unknown) => deps.log.warn(`could not delete ${deps.what}; trying again later`, { reason: describe(e) }));
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
