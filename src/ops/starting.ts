// The ops answers of a process still starting: alive (/healthz 200), not ready (/readyz 503 naming what
// start-up waits for), and its counters (/metrics). The listener switches to the service's own answers once
// it runs (server.ts use()).
import type { ServiceMetrics } from '../metrics.ts';
import type { Waiting } from '../supervisor/start-up.ts';
import type { Ops, OpsResponse } from './ops.ts';

const json = (status: number, value: unknown): OpsResponse =>
  ({ status, contentType: 'application/json; charset=utf-8', body: JSON.stringify(value) });

export function createStartingOps(metrics: ServiceMetrics, waiting: () => Waiting | undefined): Ops {
  return {
    async handle(path) {
      switch (path) {
        case '/healthz':
          return json(200, { status: 'ok' });
        case '/readyz': {
          const w = waiting();
          const detail = w ? `waiting for ${w.for} for ${Math.round((Date.now() - w.since) / 1000)} s: ${w.reason}` : 'starting';
          return json(503, { status: 'not_ready', checks: [{ name: 'startup', ok: false, detail }] });
        }
        case '/metrics':
          return { status: 200, contentType: 'text/plain; version=0.0.4; charset=utf-8', body: metrics.registry.render() };
        default:
          return undefined;
      }
    },
  };
}
