// Backlog per endpoint for /metrics: pending (not yet delivered) and ack-pending (in flight or waiting
// for a retry) from JetStream's consumer info. Gathered on scrape, one paged consumer listing per
// DELIVERIES stream and, with direct delivery, per partition stream EVENTS_<p>, cached briefly so frequent scrapes cost the server nothing more, and capped in
// label count: beyond the largest `maxEndpoints` backlogs the rest are summed as endpoint="_other".
import type { JetStreamManager } from '@nats-io/jetstream';
import { listEndpointBacklogs, sumBacklogs } from '../../streams/deliveries.ts';
import { listDirectBacklogs } from '../../streams/direct.ts';
import type { ServiceMetrics } from '../metrics.ts';

export interface BacklogOptions {
  shards: number;
  /** With direct delivery, HOOKSTREAM_EVENT_PARTITIONS: the endpoints' consumers of the partition streams count too. */
  directPartitions?: number;
  /** Reuse a listing younger than this (default 5 s). */
  cacheMs?: number;
  /** Endpoints reported by name at most (default 1000). */
  maxEndpoints?: number;
}

export interface EndpointBacklog {
  endpoint: string;
  pending: number;
  ackPending: number;
}

export interface BacklogCollector {
  /** Bring the backlog gauges up to date (from the cache when it is fresh). */
  refresh(): Promise<void>;
}

export const OTHER_ENDPOINTS = '_other';

export function createBacklogCollector(jsm: JetStreamManager, metrics: ServiceMetrics, opts: BacklogOptions): BacklogCollector {
  const cacheMs = opts.cacheMs ?? 5000;
  const maxEndpoints = opts.maxEndpoints ?? 1000;
  let fetchedAt = -Infinity;
  let running: Promise<void> | undefined;

  // An ordered endpoint's keyed consumer (issue 21) adds to its endpoint's backlog, and so does an
  // endpoint's direct consumer (streams/direct.ts), which holds its new events.
  const list = async (): Promise<EndpointBacklog[]> =>
    sumBacklogs(await listEndpointBacklogs(jsm, opts.shards), await listDirectBacklogs(jsm, opts.directPartitions ?? 0))
      .map((b) => ({ endpoint: b.endpoint, pending: b.pending, ackPending: b.ack_pending }));

  function publish(all: EndpointBacklog[]): void {
    all.sort((a, b) => b.pending + b.ackPending - (a.pending + a.ackPending) || a.endpoint.localeCompare(b.endpoint));
    metrics.backlogPending.clear();
    metrics.backlogAckPending.clear();
    for (const b of all.slice(0, maxEndpoints)) {
      metrics.backlogPending.set(b.pending, { endpoint: b.endpoint });
      metrics.backlogAckPending.set(b.ackPending, { endpoint: b.endpoint });
    }
    const rest = all.slice(maxEndpoints);
    if (rest.length > 0) {
      metrics.backlogPending.set(rest.reduce((n, b) => n + b.pending, 0), { endpoint: OTHER_ENDPOINTS });
      metrics.backlogAckPending.set(rest.reduce((n, b) => n + b.ackPending, 0), { endpoint: OTHER_ENDPOINTS });
    }
  }

  return {
    refresh() {
      if (performance.now() - fetchedAt < cacheMs) return Promise.resolve();
      // Scrapes that arrive together share one listing.
      running ??= list().then((all) => {
        publish(all);
        fetchedAt = performance.now();
      }).finally(() => { running = undefined; });
      return running;
    },
  };
}
