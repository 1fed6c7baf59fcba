// Each role supervised inside the process: a role whose loop ends while it should run (an exception that
// escaped it, a rejected promise) is stopped and started again with a capped exponential backoff, counted in
// hookstream_role_restarts_total{role}, and named by readiness while it is down. The other roles go on.
import { setTimeout as sleep } from 'node:timers/promises';
import { describe } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { Counter } from '../metrics.ts';
import { atMost } from './stops.ts';

export interface SupervisedRole {
  stop(): Promise<void>;
  /** Settles when the role's loop ends; before stop() that is a failure. A role without it is only started. */
  readonly done?: Promise<unknown>;
}

export interface RoleSupervisor {
  /** The roles down at this moment, being started again. */
  down(): string[];
  /**
   * Start a role, and again whenever its loop ends on its own. A failure of the first start is thrown (start-up
   * retries it); `onStart` sees every instance started, for those who hold the running one.
   */
  supervise<T extends SupervisedRole>(name: string, start: () => Promise<T>, onStart?: (role: T) => void): Promise<{ stop(): Promise<void> }>;
}

export function createRoleSupervisor(deps: { log: Logger; restarts: Counter; firstDelayMs?: number; maxDelayMs?: number }): RoleSupervisor {
  const down = new Set<string>();
  return {
    down: () => [...down],
    async supervise(name, start, onStart) {
      const stopping = new AbortController();
      let current = await start();
      onStart?.(current);
      let restarting: Promise<void> | undefined;

      const restart = async (reason: string) => {
        down.add(name);
        deps.log.error('role stopped on its own; starting it again', { role: name, reason });
        await atMost(current.stop(), 5000);
        let reported = false;
        for (let delay = deps.firstDelayMs ?? 500; !stopping.signal.aborted; delay = Math.min(delay * 2, deps.maxDelayMs ?? 10_000)) {
          try {
            await sleep(delay, undefined, { signal: stopping.signal });
          } catch {
            return; // stopping
          }
          deps.restarts.inc({ role: name });
          try {
            const next = await start();
            if (stopping.signal.aborted) {
              await next.stop();
              return;
            }
            current = next;
            onStart?.(next);
            watch(next);
            down.delete(name);
            deps.log.info('role running again', { role: name });
            return;
          } catch (e) {
            if (!reported) deps.log.warn('role could not start again; trying again', { role: name, reason: describe(e) });
            reported = true;
          }
        }
      };

      const watch = (role: SupervisedRole) => {
        void role.done?.then(() => 'its loop ended', (e: unknown) => describe(e)).then((reason) => {
          if (stopping.signal.aborted || role !== current) return;
          restarting = restart(reason);
        });
      };
      watch(current);

      return {
        async stop() {
          stopping.abort();
          await restarting;
          down.delete(name);
          await current.stop();
        },
      };
    },
  };
}
