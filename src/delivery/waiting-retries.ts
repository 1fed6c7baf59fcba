// Failed deliveries waiting at the server for their next attempt, as this process left them: their ack
// subject and when they are due. `hookstream endpoints retry-now` naks them, which makes the server hand
// them out at once (issue 17: after the tenant fixed the receiver, nobody waits hours for a retry step).
// A message failed by an instance that has since stopped is not here: it comes back on its schedule.
import type { NatsConnection } from '@nats-io/nats-core';
import type { EndpointId } from '../domain/ids.ts';
import { nakSubject } from '../nats/pulled-msg.ts';

export interface WaitingRetries {
  /**
   * Left unacked (or nak'd with a delay) after a failed attempt; `due` on the monotonic clock
   * (performance.now). By stream and sequence: with direct delivery an endpoint reads two streams.
   */
  remember(endpoint: EndpointId, stream: string, seq: number, ackSubject: string, due: number): void;
  /** Handed out again (to this process): no longer waiting. */
  arrived(endpoint: EndpointId, stream: string, seq: number): void;
  /** Nak every delivery of `endpoint` still waiting; returns how many. */
  bringForward(endpoint: EndpointId): number;
  /** The endpoint was deleted. */
  forget(endpoint: EndpointId): void;
}

/** Every this many remembered retries, the ones past their due time are dropped (redelivered elsewhere). */
const PRUNE_EVERY = 1024;

export function createWaitingRetries(nc: NatsConnection): WaitingRetries {
  const byEndpoint = new Map<EndpointId, Map<string, { ack: string; due: number }>>();
  let added = 0;

  function prune(now: number): void {
    for (const [endpoint, waiting] of byEndpoint) {
      for (const [seq, w] of waiting) if (w.due <= now) waiting.delete(seq);
      if (waiting.size === 0) byEndpoint.delete(endpoint);
    }
  }

  return {
    remember(endpoint, stream, seq, ack, due) {
      let waiting = byEndpoint.get(endpoint);
      if (!waiting) byEndpoint.set(endpoint, (waiting = new Map()));
      waiting.set(`${stream} ${seq}`, { ack, due });
      if (++added % PRUNE_EVERY === 0) prune(performance.now());
    },
    arrived(endpoint, stream, seq) {
      const waiting = byEndpoint.get(endpoint);
      if (waiting?.delete(`${stream} ${seq}`) && waiting.size === 0) byEndpoint.delete(endpoint);
    },
    bringForward(endpoint) {
      const waiting = byEndpoint.get(endpoint);
      if (!waiting) return 0;
      byEndpoint.delete(endpoint);
      const now = performance.now();
      let n = 0;
      // Past its due time it has been handed out already (here it would have arrived): a nak could then
      // reach an attempt running elsewhere, so only those still waiting are nak'd.
      for (const w of waiting.values()) {
        if (w.due <= now) continue;
        nakSubject(nc, w.ack);
        n++;
      }
      return n;
    },
    forget(endpoint) {
      byEndpoint.delete(endpoint);
    },
  };
}
