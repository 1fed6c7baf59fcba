// The operational HTTP surface, independent of any framework: GET /healthz (the process is up),
// GET /readyz (it can work: see readiness.ts), GET /metrics (Prometheus text). The API app routes these
// paths to handle(); a process without the api role serves them alone (server.ts).
import type { ServiceMetrics } from '../metrics.ts';
import type { BacklogCollector } from './backlog.ts';
import type { Readiness } from './readiness.ts';

export const OPS_PATHS: ReadonlySet<string> = new Set(['/healthz', '/readyz', '/metrics']);

export interface OpsResponse {
  status: number;
  contentType: string;
  body: string;
}

export interface Ops {
  /** The answer to GET `path`, or undefined when the path is not an ops path. */
  handle(path: string): Promise<OpsResponse | undefined>;
}

/** An ops answer of JSON. */
export const json = (status: number, value: unknown): OpsResponse =>
  ({ status, contentType: 'application/json; charset=utf-8', body: JSON.stringify(value) });

/** An ops answer of Prometheus text. */
export const exposition = (body: string): OpsResponse =>
  ({ status: 200, contentType: 'text/plain; version=0.0.4; charset=utf-8', body });

export function createOps(deps: { metrics: ServiceMetrics; readiness: () => Promise<Readiness>; backlog: BacklogCollector }): Ops {
  return {
    async handle(path) {
      switch (path) {
        case '/healthz':
          return json(200, { status: 'ok' });
        case '/readyz': {
          const r = await deps.readiness();
          return json(r.ready ? 200 : 503, { status: r.ready ? 'ready' : 'not_ready', checks: r.checks });
        }
        case '/metrics': {
          // A failed backlog listing (NATS down) must not hide the counters: they render anyway.
          deps.metrics.backlogStale.set(await deps.backlog.refresh().then(() => 0, () => 1));
          return exposition(deps.metrics.registry.render());
        }
        default:
          return undefined;
      }
    },
  };
}
