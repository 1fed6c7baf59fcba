// Start-up that never gives up on a dependency: each attempt runs the whole start-up; one that fails on
// something time can heal (NATS or Postgres down, restarting, frozen, electing leaders) undoes what it
// started and is tried again after a capped exponential backoff. One log line when what start-up waits for
// changes, never one per retry; readiness names it meanwhile. What needs a person (fatal.ts) ends it at once.
import { setTimeout as sleep } from 'node:timers/promises';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { Counter } from '../metrics.ts';
import { needsOperator } from './fatal.ts';

export interface Waiting {
  /** The start-up step that failed last: NATS, JetStream, Postgres, the roles. */
  for: string;
  reason: string;
  /** When start-up began waiting (Date.now()). */
  since: number;
}

export interface StartUntilUpOptions {
  log: Logger;
  /** hookstream_startup_retries_total. */
  retries: Counter;
  /** Called with what start-up waits for, and with undefined once it is up. */
  onWaiting(w: Waiting | undefined): void;
  firstDelayMs?: number;
  maxDelayMs?: number;
}

/** Run `attempt` until it succeeds; `step` names what the attempt is doing, for the log and readiness. */
export async function startUntilUp<T>(attempt: (step: (name: string) => void) => Promise<T>, opts: StartUntilUpOptions): Promise<T> {
  let waiting: Waiting | undefined;
  for (let delay = opts.firstDelayMs ?? 500; ; delay = Math.min(delay * 2, opts.maxDelayMs ?? 5000)) {
    let step = 'NATS';
    try {
      const value = await attempt((name) => { step = name; });
      if (waiting) opts.log.info('start-up went through after waiting', { waited_for: waiting.for, waited_ms: Date.now() - waiting.since });
      opts.onWaiting(undefined);
      return value;
    } catch (e) {
      if (needsOperator(e)) throw e;
      const reason = describe(e);
      if (waiting?.for !== step) opts.log.warn(`start-up is waiting for ${step}; trying again until it answers`, { reason });
      waiting = { for: step, reason, since: waiting?.since ?? Date.now() };
      opts.onWaiting(waiting);
      opts.retries.inc({ waiting_for: step });
      await sleep(delay);
    }
  }
}
