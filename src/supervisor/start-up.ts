// Start-up that never gives up on a dependency: each attempt runs the whole start-up; one that fails on
// something time can heal (NATS or Postgres down, restarting, frozen, electing leaders) undoes what it
// started and is tried again after a capped exponential backoff. One log line when what start-up waits for
// changes, never one per retry; readiness names it meanwhile. What needs a person (fatal.ts) ends it at once.
// A step that never ends (a request nobody answers, a promise nothing settles) is a failure too: past
// stepTimeoutMs without a new step, the attempt is aborted (its connections closed) and tried again.
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
  /**
   * How long one step may run. Generous: raising 128 delivery streams to three replicas or creating
   * thousands of endpoint consumers takes a minute or two.
   */
  stepTimeoutMs?: number;
}

/** A start-up step that did not finish in time. */
export class StartupStepTimeoutError extends Error {
  constructor(step: string, ms: number) {
    super(`start-up step "${step}" did not finish within ${Math.round(ms / 1000)} s`);
    this.name = 'StartupStepTimeoutError';
  }
}

const STEP_TIMEOUT_MS = 5 * 60_000;

/**
 * Run `attempt` until it succeeds; `step` names what the attempt is doing, for the log and readiness, and
 * restarts the step's watchdog; `signal` aborts when the watchdog fires: the attempt then closes what it
 * opened, so that whatever it awaits fails. An attempt that still succeeds after its watchdog fired is stopped.
 */
export async function startUntilUp<T extends { stop(): Promise<void> }>(
  attempt: (step: (name: string) => void, signal: AbortSignal) => Promise<T>, opts: StartUntilUpOptions,
): Promise<T> {
  let waiting: Waiting | undefined;
  const stepTimeoutMs = opts.stepTimeoutMs ?? STEP_TIMEOUT_MS;
  for (let delay = opts.firstDelayMs ?? 500; ; delay = Math.min(delay * 2, opts.maxDelayMs ?? 5000)) {
    let step = 'NATS';
    const abort = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    let timedOut: (e: Error) => void = () => {};
    const watchdog = new Promise<never>((_, reject) => { timedOut = reject; });
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        const e = new StartupStepTimeoutError(step, stepTimeoutMs);
        abort.abort(e);
        timedOut(e);
      }, stepTimeoutMs);
    };
    arm();
    const running = attempt((name) => { step = name; if (!abort.signal.aborted) arm(); }, abort.signal);
    try {
      const value = await Promise.race([running, watchdog]);
      clearTimeout(timer);
      if (waiting) opts.log.info('start-up went through after waiting', { waited_for: waiting.for, waited_ms: Date.now() - waiting.since });
      opts.onWaiting(undefined);
      return value;
    } catch (e) {
      clearTimeout(timer);
      // Abandoned: if it succeeds after all, what it started is stopped; a failure of it is already counted.
      if (abort.signal.aborted) running.then((late) => late.stop(), () => {}).catch(() => {});
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
