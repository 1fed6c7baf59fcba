// Direct delivery, an endpoint switched to `ordering: key` while it had a direct consumer: the routers queue
// (in order) every event stored after the switch's ENDPOINTS event, which their covering sync guarantees
// (src/router/cover.ts), and the direct consumer, kept until it holds nothing (consumers.ts), sends only
// what EVENTS stored before it. Without the cut, it went on sending every new event beside the queue: each
// twice, out of order, and never drained under steady traffic. An event in the slack after the switch (the
// clocks of a cluster's servers) may go out twice; none is lost. The switch's time unknown (its ENDPOINTS
// event compacted away), or an event's time unreadable: sent.
import type { JetStreamManager } from '@nats-io/jetstream';
import { ENDPOINTS_STREAM } from '../../streams/endpoints.ts';
import { DIRECT_START_SLACK_MS } from '../../streams/direct.ts';
import type { EndpointState } from '../domain/endpoint.ts';
import type { EventTimes } from './event-times.ts';

export interface OrderingCutoffs {
  /** Whether the direct consumer of an endpoint now ordered still sends the event at EVENTS sequence `seq`. */
  sendsDirect(endpoint: Pick<EndpointState, 'id' | 'orderedSince'>, seq: number): boolean | Promise<boolean>;
}

export function createOrderingCutoffs(deps: { jsm: JetStreamManager; eventTime: EventTimes }): OrderingCutoffs {
  /** `<endpoint>@<orderedSince>` → the time from which EVENTS' events are the router's (ms). */
  const cutoffs = new Map<string, number | Promise<number>>();

  /** When the stream stored the message (ms); undefined when it is gone; throws when it could not be read. */
  const storedAt = async (stream: string, seq: number): Promise<number | undefined> =>
    (await deps.jsm.streams.getMessage(stream, { seq }))?.time.getTime();

  function cutoff(endpoint: Pick<EndpointState, 'id' | 'orderedSince'>): number | Promise<number> {
    if (endpoint.orderedSince === undefined) return Infinity;
    const key = `${endpoint.id}@${endpoint.orderedSince}`;
    let c = cutoffs.get(key);
    if (c === undefined) {
      for (const k of cutoffs.keys()) if (k.startsWith(`${endpoint.id}@`)) cutoffs.delete(k);
      c = storedAt(ENDPOINTS_STREAM, endpoint.orderedSince).then((t) => {
        const ms = t === undefined ? Infinity : t + DIRECT_START_SLACK_MS;
        cutoffs.set(key, ms);
        return ms;
      }, () => {
        cutoffs.delete(key);
        return Infinity;
      });
      cutoffs.set(key, c);
    }
    return c;
  }

  return {
    sendsDirect(endpoint, seq) {
      const c = cutoff(endpoint);
      if (c === Infinity) return true;
      const t = deps.eventTime(seq);
      if (typeof c === 'number' && typeof t === 'number') return t < c;
      return Promise.all([c, t]).then(([cut, at]) => at < cut);
    },
  };
}
