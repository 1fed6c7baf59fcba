// The ops answers of a process still starting: alive (/healthz 200), not ready (/readyz 503 naming what
// start-up waits for), and its counters (/metrics). The listener switches to the service's own answers once
// it runs (server.ts use()).
import type { ServiceMetrics } from '../metrics.ts';
import type { Waiting } from '../supervisor/start-up.ts';
import { createOps, type Ops } from './ops.ts';

export function createStartingOps(metrics: ServiceMetrics, waiting: () => Waiting | undefined): Ops {
  return createOps({
    metrics,
    // No backlog to list before the streams are known to exist.
    backlog: { refresh: async () => {} },
    readiness: async () => {
      const w = waiting();
      const detail = w ? `waiting for ${w.for} for ${Math.round((Date.now() - w.since) / 1000)} s: ${w.reason}` : 'starting';
      return { ready: false, checks: [{ name: 'startup', ok: false, detail }] };
    },
  });
}
