// Dead letters are kept for HOOKSTREAM_DEAD_LETTER_RETENTION after they died (or were last replayed),
// then deleted, counted and logged (issue 22: they hold tenants' personal data, sealed, and were kept
// with no limit).
import type { MikroORM } from '@mikro-orm/postgresql';
import { formatDuration } from '../domain/duration.ts';
import type { Logger } from '../log.ts';
import type { ServiceMetrics } from '../metrics.ts';
import { startRetentionSweep, type RetentionSweep } from '../db/retention-sweep.ts';
import { deleteExpiredDeadLetters } from './store.ts';

export type DeadLetterRetention = RetentionSweep;

export function startDeadLetterRetention(deps: {
  orm: MikroORM; retentionMs: number; log: Logger; metrics: ServiceMetrics;
}): DeadLetterRetention {
  return startRetentionSweep({
    orm: deps.orm, retentionMs: deps.retentionMs, log: deps.log, what: 'expired dead letters',
    deleteExpired: deleteExpiredDeadLetters,
    deleted(count) {
      deps.metrics.deadLettersExpired.inc({}, count);
      deps.log.info('dead letters past their retention deleted', { count, retention: formatDuration(deps.retentionMs) });
    },
  });
}
