// Covering syncs for the router (issue 13). An event is routed at once with the directory as it is, and
// acked only after a directory sync that started after the event was read has completed: that sync has
// applied every endpoint write acked before the event was published (the write was stored before the
// event, the event before the router read it, the sync's stream info after), so the router can add
// whatever the first routing missed before the ack. Syncs are spaced at least `intervalMs` apart and
// shared by every event read before each one starts: a few JetStream API round trips per second instead
// of one per event, and none of them on the path of a delivery. No clock is compared (any server's).
import type { EndpointDirectory } from '../endpoints/directory.ts';

export interface SyncCover {
  /** Resolves once a directory sync that started after this call has completed; rejects if it failed. */
  after(): Promise<void>;
  /** Syncs started so far (for tests and the bench's profile notes). */
  syncs(): number;
  /** Fails whatever still waits (the directory is stopping). */
  stop(): void;
}

export function createSyncCover(directory: Pick<EndpointDirectory, 'sync'>, intervalMs: number): SyncCover {
  interface Waiter { resolve: () => void; reject: (e: unknown) => void }
  let waiting: Waiter[] = [];
  let running = false;
  let lastStart = -Infinity;
  let timer: NodeJS.Timeout | undefined;
  let started = 0;
  let stopped = false;

  const kick = (): void => {
    if (running || timer || waiting.length === 0 || stopped) return;
    const wait = lastStart + intervalMs - performance.now();
    if (wait > 0) {
      timer = setTimeout(() => { timer = undefined; kick(); }, wait);
      return;
    }
    // Only the callers that came before this sync starts are covered by it; later ones wait for the next.
    const batch = waiting;
    waiting = [];
    running = true;
    lastStart = performance.now();
    started++;
    directory.sync().then(
      () => { for (const w of batch) w.resolve(); },
      (e: unknown) => { for (const w of batch) w.reject(e); },
    ).finally(() => { running = false; kick(); });
  };

  return {
    after: () => new Promise<void>((resolve, reject) => {
      if (stopped) { reject(new Error('router stopping: no directory sync')); return; }
      waiting.push({ resolve, reject });
      kick();
    }),
    syncs: () => started,
    stop() {
      stopped = true;
      clearTimeout(timer);
      timer = undefined;
      const e = new Error('router stopping: no directory sync');
      for (const w of waiting.splice(0)) w.reject(e);
    },
  };
}
