// A rejected promise nobody awaited, or an exception thrown from a callback, is a bug; Node's default would
// end the process over it, taking every role (and every tenant's deliveries) with it. Logged with its stack
// and counted instead: the service carries on, and the roles' own loops recover their work.
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { Counter } from '../metrics.ts';

export function guardProcess(log: Logger, unhandled: Counter): void {
  const report = (kind: 'rejection' | 'exception', e: unknown) => {
    unhandled.inc({ kind });
    log.error(kind === 'rejection' ? 'unhandled promise rejection; carrying on' : 'uncaught exception; carrying on', {
      reason: describe(e), stack: e instanceof Error ? (e.stack ?? null) : null,
    });
  };
  process.on('unhandledRejection', (e) => report('rejection', e));
  process.on('uncaughtException', (e) => report('exception', e));
}
