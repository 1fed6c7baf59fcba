// The ops surface of one process, built from what the service already holds.
import type { MikroORM } from '@mikro-orm/postgresql';
import type { JetStreamManager } from '@nats-io/jetstream';
import type { NatsConnection } from '@nats-io/nats-core';
import type { ServiceMetrics } from '../metrics.ts';
import { createBacklogCollector } from './backlog.ts';
import { createOps, type Ops } from './ops.ts';
import { createReadiness, type ReadinessDeps } from './readiness.ts';

export { OPS_PATHS, type Ops } from './ops.ts';
export { startOpsServer, type OpsServer } from './server.ts';

export function createServiceOps(deps: {
  nc: NatsConnection;
  jsm: JetStreamManager;
  orm: MikroORM | undefined;
  metrics: ServiceMetrics;
  shards: number;
  /** HOOKSTREAM_EVENT_PARTITIONS: the partition streams readiness expects. */
  partitions?: number;
  /** HOOKSTREAM_DIRECT_DELIVERY: the backlog gauges count the endpoints' consumers of the partition streams too. */
  direct?: boolean;
  /** Whether this process answers reads from the endpoint projection (the api role). */
  checkProjection: boolean;
  directory?: ReadinessDeps['directory'];
  router?: ReadinessDeps['router'];
  roles?: ReadinessDeps['roles'];
  /** Whether /metrics lists the endpoints' backlogs (default true); false in the API's isolate of a split process. */
  backlog?: boolean;
}): Ops {
  return createOps({
    metrics: deps.metrics,
    readiness: createReadiness(deps),
    backlog: deps.backlog === false ? { refresh: async () => {} } : createBacklogCollector(deps.jsm, deps.metrics, {
      shards: deps.shards, directPartitions: deps.direct ? deps.partitions ?? 0 : 0,
    }),
  });
}
