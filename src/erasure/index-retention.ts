// Rows of the erasure index live as long as the stream's entries they came from (ERASURE_INDEX_MAX_AGE_MS):
// longer than every store an entry points into (README, retention table), then deleted and logged.
import type { MikroORM } from '@mikro-orm/postgresql';
import { ERASURE_INDEX_MAX_AGE_MS } from '../../streams/erasure-index.ts';
import type { Logger } from '../log.ts';
import { startRetentionSweep, type RetentionSweep } from '../db/retention-sweep.ts';
import { deleteExpiredIndexRows } from './index-store.ts';

export function startErasureIndexRetention(deps: { orm: MikroORM; log: Logger; retentionMs?: number }): RetentionSweep {
  return startRetentionSweep({
    orm: deps.orm, retentionMs: deps.retentionMs ?? ERASURE_INDEX_MAX_AGE_MS, log: deps.log, what: 'expired erasure index rows',
    deleteExpired: deleteExpiredIndexRows,
    deleted: (count) => deps.log.info('erasure index rows past their retention deleted', { count }),
  });
}
