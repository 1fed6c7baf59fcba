// The OpenTelemetry SDK for Node, started by register.ts when the OTEL_* variables ask for traces. It
// reads the standard variables itself (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL,
// OTEL_TRACES_SAMPLER, OTEL_RESOURCE_ATTRIBUTES, ...). Traces only: hookstream's metrics are Prometheus's
// and its logs are JSON lines, so metrics and logs exporters stay off unless asked for by name.
import { register } from 'node:module';
import { activeTraceFields, tracing } from './tracing.ts';
import { logTraceFields } from '../log.ts';
import { sqlWithoutLiterals } from './sql-text.ts';
import { pinnedIds } from './span-ids.ts';

process.env['OTEL_SERVICE_NAME'] ||= 'hookstream';
process.env['OTEL_METRICS_EXPORTER'] ||= 'none';
process.env['OTEL_LOGS_EXPORTER'] ||= 'none';

// Under ESM an instrumentation patches a module only through this loader hook, registered before the
// module is first imported. Only the instrumented modules go through it: the service's own modules and
// the rest of node_modules load as they would without tracing.
register('@opentelemetry/instrumentation/hook.mjs', import.meta.url, {
  data: { include: ['http', 'node:http', 'koa', 'pg', 'pg-pool'] },
});

const [{ NodeSDK }, { RandomIdGenerator }, { HttpInstrumentation }, { KoaInstrumentation, KoaLayerType }, { PgInstrumentation }] = await Promise.all([
  import('@opentelemetry/sdk-node'),
  import('@opentelemetry/sdk-trace'),
  import('@opentelemetry/instrumentation-http'),
  import('@opentelemetry/instrumentation-koa'),
  import('@opentelemetry/instrumentation-pg'),
]);

/** Probes and scrapes of the ops listener are not worth a trace each. */
const OPS_PATHS = new Set(['/healthz', '/readyz', '/metrics']);

const sdk = new NodeSDK({
  // Random ids, but for the router's span of an event, named from the event (span-ids.ts, event-trace.ts).
  idGenerator: pinnedIds(new RandomIdGenerator()),
  instrumentations: [
    new HttpInstrumentation({
      ignoreIncomingRequestHook: (req) => OPS_PATHS.has((req.url ?? '').split('?')[0] ?? ''),
      // The service sends no HTTP of its own through node:http (attempts use undici and have their own span).
      disableOutgoingRequestInstrumentation: true,
      // The portal link's single-use token (/portal?token=…) is the only secret a query string carries.
      redactedQueryParamsServer: ['token'],
    }),
    // The router's layer (named by its route) only: the app's middleware would add five anonymous spans per request.
    new KoaInstrumentation({ ignoreLayersType: [KoaLayerType.MIDDLEWARE] }),
    // Only queries made for a traced request or dead letter: the projector's and the sweeps' own
    // queries would each be a trace of one span.
    new PgInstrumentation({
      requireParentSpan: true,
      requestHook: (span, { query }) => { if (query.text) span.setAttribute('db.query.text', sqlWithoutLiterals(query.text)); },
    }),
  ],
});
sdk.start();
tracing.on = true;
logTraceFields(activeTraceFields);

// The service stops by itself on SIGTERM (it never calls process.exit): the last spans go out then.
process.once('beforeExit', () => void sdk.shutdown().catch(() => {}));
