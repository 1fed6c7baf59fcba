// A small Prometheus registry: counters and histograms with labels, rendered in the text format.
// The roles count what happens; GET /metrics renders it.

type Labels = Record<string, string>;
// The series key of a label set, computed on every inc/observe (a few per delivery): names sorted, then
// name/value pairs joined with separators no label name can hold. JSON.stringify of sorted entries with
// localeCompare cost ~0.5 % of the service's CPU in the throughput profile (issue 5).
const key = (labels: Labels): string => {
  let out = '';
  let names: string[] | undefined;
  for (const name in labels) (names ??= []).push(name);
  if (!names) return out;
  if (names.length > 1) names.sort();
  for (const name of names) out += `${name}\u0001${labels[name]}\u0002`;
  return out;
};
const fmt = (labels: Labels, extra?: Labels) => {
  const all = { ...labels, ...extra };
  const parts = Object.entries(all).map(([k, v]) => `${k}="${v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`);
  return parts.length ? `{${parts.join(',')}}` : '';
};

export interface Counter {
  inc(labels?: Labels, by?: number): void;
  get(labels?: Labels): number;
  /** One label set's series, its key computed once: for a hot path that counts the same labels again and again. */
  series(labels: Labels): { inc(by?: number): void };
}

export interface Histogram {
  observe(value: number, labels?: Labels): void;
}

export interface Gauge {
  set(value: number, labels?: Labels): void;
  /** Forget every series (a snapshot gauge is rebuilt whole, so gone label sets disappear). */
  clear(): void;
}

interface Family {
  name: string;
  help: string;
  type: 'counter' | 'histogram' | 'gauge';
  render(): string[];
}

export class Metrics {
  readonly #families: Family[] = [];

  counter(name: string, help: string): Counter {
    const values = new Map<string, { labels: Labels; value: number }>();
    this.#families.push({
      name, help, type: 'counter',
      render: () => [...values.values()].map((v) => `${name}${fmt(v.labels)} ${v.value}`),
    });
    return {
      inc(labels = {}, by = 1) {
        const k = key(labels);
        const v = values.get(k);
        if (v) v.value += by;
        else values.set(k, { labels, value: by });
      },
      get: (labels = {}) => values.get(key(labels))?.value ?? 0,
      series(labels) {
        const k = key(labels);
        // Shown from its first inc, as with inc(labels).
        let v: { labels: Labels; value: number } | undefined;
        return {
          inc(by = 1) {
            v ??= values.get(k);
            if (v) v.value += by;
            else values.set(k, (v = { labels, value: by }));
          },
        };
      },
    };
  }

  gauge(name: string, help: string): Gauge {
    const values = new Map<string, { labels: Labels; value: number }>();
    this.#families.push({
      name, help, type: 'gauge',
      render: () => [...values.values()].map((v) => `${name}${fmt(v.labels)} ${v.value}`),
    });
    return { set: (value, labels = {}) => void values.set(key(labels), { labels, value }), clear: () => values.clear() };
  }

  histogram(name: string, help: string, buckets: number[]): Histogram {
    const series = new Map<string, { labels: Labels; counts: number[]; sum: number; count: number }>();
    this.#families.push({
      name, help, type: 'histogram',
      render: () => [...series.values()].flatMap((s) => [
        ...buckets.map((b, i) => `${name}_bucket${fmt(s.labels, { le: String(b) })} ${s.counts[i]}`),
        `${name}_bucket${fmt(s.labels, { le: '+Inf' })} ${s.count}`,
        `${name}_sum${fmt(s.labels)} ${s.sum}`,
        `${name}_count${fmt(s.labels)} ${s.count}`,
      ]),
    });
    return {
      observe(value, labels = {}) {
        const k = key(labels);
        let s = series.get(k);
        if (!s) series.set(k, (s = { labels, counts: buckets.map(() => 0), sum: 0, count: 0 }));
        for (let i = 0; i < buckets.length; i++) if (value <= buckets[i]!) s.counts[i]!++;
        s.sum += value;
        s.count++;
      },
    };
  }

  render(): string {
    return this.#families
      .flatMap((f) => [`# HELP ${f.name} ${f.help}`, `# TYPE ${f.name} ${f.type}`, ...f.render()])
      .join('\n') + '\n';
  }
}

/** The service's metrics, one set per process. */
export function createServiceMetrics(registry = new Metrics()) {
  return {
    registry,
    eventsReceived: registry.counter('hookstream_events_received_total', 'Events read from the EVENTS stream'),
    eventsRejected: registry.counter('hookstream_events_rejected_total', 'Events not delivered, by reason (kept in REJECTED)'),
    eventsRetried: registry.counter('hookstream_events_retried_total', 'Events handed back to be routed later: routing failed for a reason not their own'),
    deliveriesEnqueued: registry.counter('hookstream_deliveries_enqueued_total', 'Deliveries fanned out to endpoints'),
    eventsHeld: registry.counter('hookstream_router_events_held_total', 'Events that waited unrouted because their tenant had its share of the router\'s fan-out pending'),
    eventsDrained: registry.counter('hookstream_router_events_drained_total', 'Events the router\'s consumer acked unrouted because a drain of their tenant (over its limits) routes them at its rate'),
    drains: registry.gauge('hookstream_router_drains', 'Tenants over their limits this process drains from EVENTS now'),
    deliveriesDropped: registry.counter('hookstream_deliveries_dropped_total', 'Deliveries an endpoint\'s full queue refused (HOOKSTREAM_MAX_QUEUED)'),
    attempts: registry.counter('hookstream_delivery_attempts_total', 'Delivery attempts, by event type'),
    acknowledged: registry.counter('hookstream_deliveries_acknowledged_total', 'Deliveries answered with 2xx, by event type'),
    failed: registry.counter('hookstream_delivery_attempts_failed_total', 'Failed attempts, by event type and kind'),
    dead: registry.counter('hookstream_deliveries_dead_total', 'Deliveries that ran out of retries, by event type'),
    deadLettersStored: registry.counter('hookstream_dead_letters_stored_total', 'Dead-letter records written'),
    deadLettersBackstop: registry.counter('hookstream_dead_letters_backstop_total', 'Dead deliveries found in their queue by the backstop: their max-deliveries advisory was lost'),
    deliveryDivergence: registry.gauge('hookstream_delivery_consumer_divergence',
      'Deliveries a delivery stream holds that its consumer has neither pending nor in flight, for 3 backstop scans or more, by stream and consumer: diverged replicas (should be 0)'),
    deadLettersReplayed: registry.counter('hookstream_dead_letters_replayed_total', 'Dead letters replayed'),
    deadLettersExpired: registry.counter('hookstream_dead_letters_expired_total', 'Dead letters deleted past HOOKSTREAM_DEAD_LETTER_RETENTION'),
    opsEventsPublished: registry.counter('hookstream_ops_events_published_total', 'Operational events stored in OPS, by type'),
    endpointsDisabled: registry.counter('hookstream_endpoints_disabled_total', 'Endpoints this process disabled, by reason'),
    adminRefused: registry.counter('hookstream_admin_requests_refused_total', 'Admin requests left unanswered, by reason'),
    projectionSkipped: registry.counter('hookstream_projection_events_skipped_total', 'Events a projector skipped (unusable, or refused by Postgres), by projection'),
    consumerRepulls: registry.counter('hookstream_consumer_repulls_total', 'Pulls renewed because a consumer this process pulls elected a leader'),
    attemptSeconds: registry.histogram('hookstream_attempt_duration_seconds', 'Duration of delivery attempts',
      [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30]),
    messagesHeld: registry.gauge('hookstream_delivery_messages_held', 'Deliveries this process holds: in their attempt, or waiting for a lane or a rate-limit token'),
    messagesParked: registry.gauge('hookstream_delivery_messages_parked', 'Keyed deliveries this process holds behind the head of their ordering key (ordering: key)'),
    roleRestarts: registry.counter('hookstream_role_restarts_total', 'Roles started again after their loop failed, by role'),
    startupRetries: registry.counter('hookstream_startup_retries_total', 'Start-up attempts that failed on a dependency and were tried again, by what they waited for'),
    unhandledErrors: registry.counter('hookstream_unhandled_errors_total', 'Unhandled promise rejections and uncaught exceptions (bugs the process survived), by kind'),
    logLinesDropped: registry.counter('hookstream_log_lines_dropped_total', 'Log lines dropped because stderr was not keeping up'),
    directorySkipped: registry.counter('hookstream_directory_events_skipped_total', 'Endpoint events the endpoint directory skipped (the fold every reader uses refused them)'),
    directoryLag: registry.gauge('hookstream_directory_lag_seconds', 'Seconds since the endpoint directory last proved itself complete, while it is not (0 when it is)'),
    endpointsProbing: registry.gauge('hookstream_endpoints_probing', 'Endpoints this process probes one attempt at a time because their recent attempts all failed'),
    backlogStale: registry.gauge('hookstream_endpoint_backlog_stale', '1 when the last backlog listing from JetStream failed'),
    backlogPending: registry.gauge('hookstream_endpoint_backlog_pending', 'Deliveries waiting per endpoint'),
    tenantLimitHits: registry.counter('hookstream_tenant_limit_hits_total', 'Requests refused, or events the router held back, because their tenant reached one of its quotas, by limit'),
    authThrottled: registry.counter('hookstream_auth_throttled_total', 'API requests refused before their key was looked up, because their source address or key prefix failed too often (surface="api")'),
    backlogAckPending: registry.gauge('hookstream_endpoint_backlog_ack_pending', 'Deliveries in flight or awaiting retry per endpoint'),
  };
}
export type ServiceMetrics = ReturnType<typeof createServiceMetrics>;
