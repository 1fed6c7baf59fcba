// Direct delivery's window as a process that decides events knows it: events EVENTS stored in
// [since, until) are the direct consumers', the others the routers' queues (streams/events.ts). The
// switch-off is written DIRECT_UNTIL_LEAD_MS ahead, so a read made at R shows every change that can apply
// to an event stored before R + LEAD: an event is decided only when the last good read covers it (or
// shows `until` and the event is before it). Otherwise the decision waits for a read that does; a process
// that cannot read EVENTS waits, never guesses (a wrong guess loses an event: the routers leave it to the
// direct consumers, which leave it to the routers).
import { DIRECT_UNTIL_LEAD_MS, inDirectWindow } from '../../streams/events.ts';

/** How often the window is read again. */
export const WINDOW_REFRESH_MS = 3000;
/** The clocks of the writer, the reader and EVENTS' leader may differ by this much (as DIRECT_START_SLACK_MS). */
export const WINDOW_CLOCK_MARGIN_MS = 1000;

/** A waiting decision reads again at once, unless a read started this recently. */
const SOONEST_MS = 250;

export type Window = { directSince: number | undefined; directUntil: number | undefined };

export interface DirectWindow {
  /** Whether an event EVENTS stored at `at` (ms) is the direct consumers' (since ≤ at < until); undefined while not known for it. */
  direct(at: number): boolean | undefined;
  /** Whether it was stored before direct delivery stops (at < until); undefined while not known for it. */
  beforeUntil(at: number): boolean | undefined;
  /** Resolves once the window is known for `at`: at once when it is, else after a read that covers it. */
  known(at: number): Promise<void>;
  /** The window as last read; undefined before a read succeeded. */
  current(): Window | undefined;
  /** Read it again now (the timer does every refreshMs). */
  refresh(): Promise<void>;
  stop(): void;
}

export function createDirectWindow(deps: {
  /** EVENTS' window (its stream info's metadata). */
  read: () => Promise<Window>;
  /** A read already made at start-up, and when it started. */
  initial?: { window: Window; at: number };
  now?: () => number;
  refreshMs?: number;
  leadMs?: number;
  /** A read failed (it is tried again at the next refresh). */
  onError?: (e: unknown) => void;
}): DirectWindow {
  const now = deps.now ?? Date.now;
  const lead = deps.leadMs ?? DIRECT_UNTIL_LEAD_MS;
  let last: { window: Window; at: number } | undefined = deps.initial;
  const waiters: { at: number; resolve: () => void }[] = [];
  let reading: Promise<void> | undefined;
  let triedAt = -Infinity;

  const knownFor = (at: number): Window | undefined => {
    if (!last) return undefined;
    const { window } = last;
    if (window.directUntil !== undefined && at < window.directUntil) return window;
    return at < last.at + lead - WINDOW_CLOCK_MARGIN_MS ? window : undefined;
  };

  async function readOnce(): Promise<void> {
    // The read's start: it shows everything written before then.
    const at = now();
    triedAt = at;
    try {
      const window = await deps.read();
      if (!last || at >= last.at) last = { window, at };
    } catch (e) {
      deps.onError?.(e);
      return;
    }
    for (let i = waiters.length - 1; i >= 0; i--) {
      if (knownFor(waiters[i]!.at)) waiters.splice(i, 1)[0]!.resolve();
    }
  }
  const refresh = (): Promise<void> => (reading ??= readOnce().finally(() => { reading = undefined; }));

  const timer = setInterval(() => void refresh(), deps.refreshMs ?? WINDOW_REFRESH_MS);
  timer.unref();
  if (!last) void refresh();

  return {
    direct(at) {
      const w = knownFor(at);
      return w && inDirectWindow(w, at);
    },
    beforeUntil(at) {
      const w = knownFor(at);
      return w && (w.directUntil === undefined || at < w.directUntil);
    },
    known(at) {
      if (knownFor(at)) return Promise.resolve();
      return new Promise((resolve) => {
        waiters.push({ at, resolve });
        // Sooner than the timer, a decision waiting (but not in a loop while reads fail at once).
        if (now() - triedAt >= SOONEST_MS) void refresh();
      });
    },
    current: () => last?.window,
    refresh,
    stop: () => clearInterval(timer),
  };
}
