// Direct delivery turned off (`until` in EVENTS' metadata, streams/events.ts): a direct consumer sends the
// copies of events EVENTS stored before `until` and acks the later ones unsent, which the routers queue to
// every endpoint. Decided by the event's time, as the routers decide it, never guessed: while this process
// does not know the window for that time (src/delivery/direct-window.ts), the copy waits.
import { DIRECT_START_SLACK_MS } from '../../streams/direct.ts';
import type { DirectWindow } from './direct-window.ts';
import type { EventTimes } from './event-times.ts';

export interface DirectCut {
  /** Whether the copy of the event at EVENTS sequence `seq`, in hand now, is sent directly. */
  sends(seq: number): boolean | Promise<boolean>;
}

export function createDirectCut(deps: { window: DirectWindow; eventTime: EventTimes; now?: () => number }): DirectCut {
  const { window } = deps;
  const now = deps.now ?? Date.now;
  async function beforeUntil(at: number): Promise<boolean> {
    for (;;) {
      const before = window.beforeUntil(at);
      if (before !== undefined) return before;
      await window.known(at);
    }
  }
  return {
    sends(seq) {
      // The event was stored before its copy is in hand (less the slack between the clocks of this process
      // and the servers): until the switch-off is near, copies are decided with no read of the event's time.
      if (window.beforeUntil(now() + DIRECT_START_SLACK_MS) === true) return true;
      const at = deps.eventTime(seq);
      return typeof at === 'number' ? beforeUntil(at) : at.then(beforeUntil);
    },
  };
}
