// Read-side waiting: a command's writer waits until the read model has applied the command's event, so
// its answer never shows a state older than the write. The wait ends on the checkpoint, whichever
// projector (this process's or another instance's) moved it.
import type { MikroORM } from '@mikro-orm/postgresql';
import { ErrorCode, HookstreamError, describe } from '../src/errors.ts';
import type { Logger } from '../src/log.ts';
import { readCheckpoint, type Projection } from './checkpoint.ts';

export const DEFAULT_WAIT_MS = 5000;
const POLL_MS = 50;

/** The projection did not reach a sequence in time: `unavailable`, the API answers 503 with retry-after, never a stale read. */
export class ProjectionLagError extends HookstreamError {
  constructor(projection: string, seq: number, reached: number, timeoutMs: number) {
    super(ErrorCode.Unavailable, `projection ${projection} did not reach stream sequence ${seq} within ${timeoutMs} ms (it is at ${reached})`, { retryAfterSeconds: 1 });
    this.name = 'ProjectionLagError';
  }
}

/** Wait `ms`, or less when `signal` aborts (shutdown must not sit out a retry delay). */
export const sleep = (ms: number, signal?: AbortSignal) => new Promise<void>((resolve) => {
  const done = () => { clearTimeout(timer); signal?.removeEventListener('abort', done); resolve(); };
  const timer = setTimeout(done, ms);
  signal?.addEventListener('abort', done, { once: true });
});

/** For processes that run no projector: poll the checkpoint until it reaches `seq`. */
export async function waitForCheckpoint(orm: MikroORM, name: Projection, seq: number, timeoutMs = DEFAULT_WAIT_MS): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const at = await readCheckpoint(orm, name);
    if (at >= seq) return;
    if (Date.now() >= until) throw new ProjectionLagError(name, seq, at, timeoutMs);
    await sleep(POLL_MS);
  }
}

export interface CheckpointWaiters {
  /** Highest sequence known to be applied (here or by another instance). */
  known(): number;
  /** This process applied up to `seq`: settle the waits it covers without a query. */
  advance(seq: number): void;
  /** Resolve once the projection has applied `seq`; reject with ProjectionLagError after `timeoutMs`. */
  waitFor(seq: number, timeoutMs?: number): Promise<void>;
  /** Reject every pending wait and end the polling; later waits poll the checkpoint on their own. */
  stop(): Promise<void>;
}

/** The waits on a projection that runs in this process, from checkpoint `initial` on. */
export function createCheckpointWaiters(deps: { orm: MikroORM; name: Projection; log: Logger; initial: number }): CheckpointWaiters {
  interface Waiter { seq: number; resolve: () => void; reject: (e: Error) => void; timer: NodeJS.Timeout }
  const waiters = new Set<Waiter>();
  const stopping = new AbortController();
  let known = deps.initial;
  let polling: Promise<void> | undefined;

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
  const pollLoop = async () => {
    // Sleep first: usually this projector applies the event within the first interval, and then
    // the wait costs no query at all.
    while (waiters.size > 0 && !stopping.signal.aborted) {
      await sleep(POLL_MS, stopping.signal);
      if (waiters.size === 0 || stopping.signal.aborted) break;
      try {
        advance(await readCheckpoint(deps.orm, deps.name));
      } catch (e) {
        deps.log.warn('cannot read projection checkpoint', { reason: describe(e) });
      }
    }
  };
  const poll = () => {
    polling ??= pollLoop().finally(() => { polling = undefined; });
  };

  return {
    known: () => known,
    advance,
    waitFor(seq, timeoutMs = DEFAULT_WAIT_MS) {
      if (seq <= known) return Promise.resolve();
      if (stopping.signal.aborted) return waitForCheckpoint(deps.orm, deps.name, seq, timeoutMs);
      return new Promise<void>((resolve, reject) => {
        const w: Waiter = {
          seq, resolve, reject,
          timer: setTimeout(() => {
            waiters.delete(w);
            reject(new ProjectionLagError(deps.name, seq, known, timeoutMs));
          }, timeoutMs),
        };
        waiters.add(w);
        poll();
      });
    },
    async stop() {
      stopping.abort();
      for (const w of waiters) {
        clearTimeout(w.timer);
        w.reject(new HookstreamError(ErrorCode.Internal, `projector stopped before reaching stream sequence ${w.seq}`));
      }
      waiters.clear();
      // A checkpoint read still running when the caller closes the pool would hold the close forever.
      await polling;
    },
  };
}
